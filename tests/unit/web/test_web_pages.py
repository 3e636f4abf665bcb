"""The audit page, as served HTML: readable without JavaScript (tables rendered by the
server), with the server's audit status, the charts' data, and the commands to verify."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from unit.web.html_tables import links, tables
from unit.web.web_fixture_run import DemoRun, settings_for

from attestation.enrolment import cluster_fingerprint
from ledger.db import create_engine
from ledger.models import Entry
from web import run_page
from web.app import create_app
from web.settings import AppSettings
from web.templating import script_json


@pytest.fixture(scope="module")
def page(client: TestClient, demo_run: DemoRun) -> str:
    response = client.get(f"/runs/{demo_run.run_id}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    return response.text


def test_the_runs_list_links_every_run(client: TestClient, demo_run: DemoRun) -> None:
    html = client.get("/").text

    (header, row) = tables(html)["runs"]
    assert header[:2] == ["Run", "Status"]
    assert row[:4] == [demo_run.run_id, "finished", str(demo_run.steps), str(demo_run.steps + 3)]
    assert {"href": f"/runs/{demo_run.run_id}"} in links(html)


def test_every_table_scrolls_sideways_in_its_own_frame_on_a_narrow_screen(
    client: TestClient, page: str
) -> None:
    """Each table sits alone in a ``.table-wrap`` frame (style.css), so a phone scrolls the
    table, not the page: the run page's and the runs list's alike."""
    for html in (page, client.get("/").text):
        opened = re.findall(r'<div class="table-wrap">\s*<table class="([\w-]+)">', html)
        closed = re.findall(r"</table>\s*</div>", html)
        assert opened, "expected tables on the page, got none"
        assert len(opened) == html.count("<table") == len(closed)


def test_the_step_table_is_server_rendered_newest_first_with_anomalies(
    page: str, demo_run: DemoRun
) -> None:
    header, *rows = tables(page)["steps"]

    assert header[:3] == ["Step", "Recorded (UTC)", "Train loss"]
    assert [int(r[0]) for r in rows] == list(range(demo_run.last_step, -1, -1))
    flagged = {r[0]: r[header.index("Anomalies")] for r in rows}
    assert flagged["1"] == "cluster 1" and flagged["0"] == "none"
    assert rows[-1][header.index("Rank")] == "8" and rows[0][header.index("Rank")] == "4"


def test_the_step_table_shows_every_clusters_contribution_scores_next_to_the_flags(
    page: str,
) -> None:
    header, *rows = tables(page)["steps"]

    column = header.index("Contribution scores (held-out / own data)")
    assert column == header.index("Anomalies") + 1
    scores = {r[0]: r[column] for r in rows}
    assert (
        scores["1"] == "0: -0.05 / -0.06, 1: -0.1 / -0.12"
    )  # the fixture's scores, held-out / own
    assert (
        'title="norm 812.4 is 96x the reference 8.46 (limit 10x)"' in page
    )  # the flagged one says why


def test_every_step_on_the_page_shows_what_the_model_said(page: str, demo_run: DemoRun) -> None:
    section = page[page.index('<section id="generations"') : page.index('<section id="data"')]

    steps = re.findall(r"<summary>Step (\d+)</summary>", section)
    assert [int(s) for s in steps] == list(range(demo_run.last_step, -1, -1))
    prompts = [row[0] for row in tables(section)["generations"][1:]]
    assert prompts == [
        "def",
        "class",
    ]  # the fixture's prompts, for the newest step (cells are stripped)


def test_the_status_says_it_is_the_servers_own_check_and_passes(page: str) -> None:
    status = page[page.index('<section id="status"') : page.index("</section>")]

    assert 'class="card ok"' in status
    assert "this server's own check" in status
    assert status.count('class="pass"') == 4
    assert "software" in status


def test_the_latest_checkpoint_files_link_to_their_bytes(
    client: TestClient, page: str, demo_run: DemoRun
) -> None:
    downloads = [a for a in links(page) if a.get("class") == "download"]
    latest = demo_run.checkpoints[demo_run.last_step].files

    assert {a["download"]: a["data-sha256"] for a in downloads} == latest
    for a in downloads:
        assert hashlib.sha256(client.get(a["href"]).content).hexdigest() == a["data-sha256"]


def test_the_data_manifest_shows_sources_licences_and_shard_counts(page: str) -> None:
    found = tables(page)

    assert found["sources"][1][:3] == ["file://corpus/fixture.txt", "CC0-1.0", "19"]
    assert "1 source, 19 bytes; licences: CC0-1.0 (1)." in " ".join(page.split())
    assert found["shards"][1:] == [["eval", "1", "4,096"], ["train", "3", "12,288"]]


def test_the_genesis_shows_code_keys_and_measurements(page: str, demo_run: DemoRun) -> None:
    genesis = page[page.index('<section id="genesis"') :]
    roles = [row[0] for row in tables(page)["keys"][1:]]

    assert "launch measurement" in genesis and "Reference measurements" in genesis
    assert roles[0] == "log" and demo_run.log_vkey in genesis
    assert roles[1:] == ["statement"] + [
        f"cluster {c} {role}"
        for c in range(2)
        for role in ("fingerprint", "contribution", "attestation", "platform root")
    ]
    # One fingerprint per cluster over its three enrolled keys, for its operator to compare
    # with `veritrain cluster-keys` on its own host.
    rows = {row[0]: row[1] for row in tables(page)["keys"][1:]}
    for c in range(2):
        assert rows[f"cluster {c} fingerprint"] == cluster_fingerprint(
            contribution=rows[f"cluster {c} contribution"],
            attestation=rows[f"cluster {c} attestation"],
            platform_root=rows[f"cluster {c} platform root"],
        )
    assert "veritrain verify --cluster-key J=VKEY" in genesis


def test_the_verify_block_has_the_exact_commands_for_this_server(
    page: str, demo_run: DemoRun
) -> None:
    verify = page[page.index('<section id="verify"') :]

    assert f"veritrain verify --api http://testserver {demo_run.run_id}" in verify
    assert (
        f"veritrain reproduce {demo_run.run_id} --step {demo_run.last_step} --api http://testserver"
        in verify
    )
    assert f"veritrain note verify --vkey '{demo_run.log_vkey}' checkpoint.txt" in verify


def test_the_chart_data_is_embedded_downsampled_json(page: str, demo_run: DemoRun) -> None:
    embedded = re.search(
        r'<script type="application/json" id="chart-data">(.*?)</script>', page, re.S
    )
    assert embedded is not None
    data = json.loads(embedded.group(1))

    assert set(data) == {"train_loss", "eval_loss", "perplexity", "bytes_sent", "rank"}
    assert data["train_loss"]["steps"] == list(range(demo_run.steps))
    for chart in ("loss", "perplexity", "bytes", "rank"):
        assert f'id="chart-{chart}"' in page


def test_embedded_json_cannot_close_its_script_element() -> None:
    text = script_json({"key": "</script><script>alert(1)</script>"})

    assert "</script>" not in text
    assert json.loads(text) == {"key": "</script><script>alert(1)</script>"}


def test_plotly_is_served_by_the_app_compressed_and_cached_forever(
    client: TestClient, page: str
) -> None:
    src = re.search(r'<script src="(/static/vendor/plotly-[0-9a-f]{16}\.min\.js)"', page)
    assert src is not None
    gzipped = client.get(src.group(1), headers={"Accept-Encoding": "gzip"})
    plain = client.get(src.group(1), headers={"Accept-Encoding": "identity"})

    assert gzipped.headers["content-encoding"] == "gzip"
    assert gzipped.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert gzipped.content == plain.content  # the client decompressed it
    assert b"plotly" in plain.content[:2000].lower()
    assert client.get("/static/vendor/plotly-0000000000000000.min.js").status_code == 404


def test_the_step_table_pages_through_long_runs(
    client: TestClient, demo_run: DemoRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_page, "ROWS_PER_PAGE", 3)
    first = client.get(f"/runs/{demo_run.run_id}").text
    second = client.get(f"/runs/{demo_run.run_id}", params={"page": 2}).text
    beyond = client.get(f"/runs/{demo_run.run_id}", params={"page": 99}).text

    steps = [[r[0] for r in tables(html)["steps"][1:]] for html in (first, second)]
    assert steps == [["3", "2"], ["1", "0"]]  # entries 4..6 hold steps 2-3 and run.final
    assert "page 1 of 3" in first and "older" in first
    assert "page 3 of 3" in beyond and "older" not in beyond


def test_an_unknown_run_is_a_404_page(client: TestClient) -> None:
    response = client.get("/runs/no-such-run")

    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert "no run &#39;no-such-run&#39;" in response.text


def test_a_tampered_entry_turns_the_status_red_and_names_the_entry(fresh_run: DemoRun) -> None:
    engine = create_engine(fresh_run.database_url)
    with engine.begin() as conn:
        body = conn.execute(
            sa.select(Entry.body).where(Entry.run_id == fresh_run.run_id, Entry.index == 2)
        ).scalar_one()
        conn.execute(
            sa.update(Entry)
            .where(Entry.run_id == fresh_run.run_id, Entry.index == 2)
            .values(body=body.replace(b'"inner_steps":8', b'"inner_steps":9'))
        )
    engine.dispose()

    with TestClient(create_app(settings_for(fresh_run))) as client:
        html = client.get(f"/runs/{fresh_run.run_id}").text

    status = html[html.index('<section id="status"') : html.index("</section>")]
    assert 'class="card failed"' in status
    assert "Log audit failed at entry 2" in status


def test_a_run_with_only_a_bare_genesis_still_renders(tmp_path: Path) -> None:
    from ledger.db import upgrade
    from ledger.keyring import InMemoryLogKeys
    from ledger.service import Ledger

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    engine = create_engine(url)
    Ledger(engine, origin="test.local", log_keys=InMemoryLogKeys()).create_run(
        "bare", {"note": "no documented fields"}
    )
    engine.dispose()

    with TestClient(
        create_app(AppSettings(database_url=url, store_url=f"file://{tmp_path / 'o'}"))
    ) as client:
        response = client.get("/runs/bare")

    assert response.status_code == 200
    assert 'class="card ok"' in response.text
    assert "No outer step recorded yet, so no checkpoint" in response.text
    assert "No outer steps on this page." in response.text
    assert "No data manifest recorded yet." in response.text
