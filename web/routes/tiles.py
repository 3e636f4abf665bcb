"""Each run's log as a C2SP tlog-tiles log (https://c2sp.org/tlog-tiles), with the prefix
``/api/v1/runs/{run}/tlog``, so standard tile clients and monitors can read and verify it
without the JSON API:

    GET <prefix>/checkpoint                  the newest signed tree head with its witness
                                             cosignatures (text/plain; charset=utf-8)
    GET <prefix>/tile/<L>/<N>[.p/<W>]        Merkle tree tiles (application/octet-stream)
    GET <prefix>/tile/entries/<N>[.p/<W>]    entry bundles: the entries' canonical bodies

Layout and path encoding are ``ledger/tiles.py``; hashes come from the stored tree nodes.
The checkpoint changes as the run grows, so it is cached for seconds. A full tile or bundle
never changes: cached for a year as immutable. A partial one never changes either, but the
log may stop serving it once the full one exists (tlog-tiles), so it is cached briefly.
Entry bundles are gzipped when the client accepts it (tlog-tiles: they SHOULD be
compressed at the HTTP layer).
"""

from __future__ import annotations

import gzip

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from ledger.tiles import parse_tile_path
from web.deps import IMMUTABLE, SHORT, LedgerDep
from web.params import RunPath
from web.schemas import ResponsesDoc

router = APIRouter(prefix="/api/v1/runs/{run}/tlog", tags=["tlog-tiles"])

OCTETS = "application/octet-stream"
ERRORS: ResponsesDoc = {404: {"description": "No such run, or no such tile in the log (yet)."}}


@router.get(
    "/checkpoint",
    response_class=PlainTextResponse,
    responses={**ERRORS, 200: {"content": {"text/plain": {}}, "description": "C2SP checkpoint."}},
    summary="tlog-tiles checkpoint",
    description="The newest C2SP tlog-checkpoint, signed by the run's log key (Ed25519), with "
    "every witness cosignature collected for it.",
)
async def get_checkpoint(run: RunPath, ledger: LedgerDep) -> PlainTextResponse:
    head = ledger.cosigned_tree_head(run)
    return PlainTextResponse(
        head.note, media_type="text/plain; charset=utf-8", headers={"Cache-Control": SHORT}
    )


@router.get(
    "/tile/{path:path}",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {OCTETS: {}}, "description": "A tile or entry bundle."}},
    summary="tlog-tiles tile or entry bundle",
    description="`tile/<L>/<N>[.p/<W>]`: 256 (or W) consecutive SHA-256 Merkle tree hashes at "
    "tile level L. `tile/entries/<N>[.p/<W>]`: the entries of level-0 tile N, each as a "
    "big-endian uint16 length and the entry's canonical JSON body. N is written in 3-digit "
    "elements, all but the last prefixed by `x` (1234067 is `x001/x234/067`).",
)
def get_tile(run: RunPath, path: str, ledger: LedgerDep, request: Request) -> Response:
    # Plain ``def``: a bundle of 256 entries is read and gzipped in the thread pool, off the loop.
    tile = parse_tile_path(path)
    data = ledger.tile(run, tile)
    headers = {"Cache-Control": SHORT if tile.is_partial else IMMUTABLE}
    if tile.level is None:
        headers["Vary"] = "Accept-Encoding"
        if _accepts_gzip(request.headers.get("accept-encoding", "")):
            headers["Content-Encoding"] = "gzip"
            data = gzip.compress(data, compresslevel=6, mtime=0)
    return Response(data, media_type=OCTETS, headers=headers)


def _accepts_gzip(accept_encoding: str) -> bool:
    for item in accept_encoding.split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip().removeprefix("q=").strip()
            return not q or _positive(q)
    return False


def _positive(q: str) -> bool:
    try:
        return float(q) > 0
    except ValueError:
        return False
