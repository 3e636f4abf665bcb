"""docker-compose.yml and the Dockerfile, checked without a Docker engine: the compose file
parses, its services wire together, and every veritrain service is configured through the
same ``VERITRAIN_*`` variables the settings class reads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from veritrain.record.provenance import PACKAGES
from veritrain.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
VERITRAIN_SERVICES = ("api", "cluster-0", "cluster-1", "s3-bucket")
CLUSTERS = ("cluster-0", "cluster-1")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(document, dict)
    return document


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), (
        "environment should be a mapping (the shared x-veritrain-env anchor)"
    )
    return {str(k): str(v) for k, v in env.items()}


def command(service: dict[str, Any]) -> str:
    value = service["command"]
    return value if isinstance(value, str) else " ".join(value)


def test_the_stack_has_its_parts(compose: dict[str, Any]) -> None:
    services = compose["services"]

    assert {"postgres", "s3", "api", "lighthouse", *CLUSTERS} <= set(services)
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["s3"]["image"].startswith("chrislusf/seaweedfs")
    assert "-s3" in services["s3"]["command"]


def test_every_veritrain_variable_is_a_settings_field(compose: dict[str, Any]) -> None:
    fields = {f"VERITRAIN_{name.upper()}" for name in Settings.model_fields}
    for name in VERITRAIN_SERVICES:
        used = {k for k in environment(compose["services"][name]) if k.startswith("VERITRAIN_")}
        assert used, f"{name} sets no VERITRAIN_* variable"
        assert used <= fields, (
            f"{name} sets unknown settings {sorted(used - fields)}; the fields are {sorted(fields)}"
        )


def test_the_api_and_the_coordinating_cluster_share_one_ledger_and_store(
    compose: dict[str, Any],
) -> None:
    api, coordinator = (environment(compose["services"][n]) for n in ("api", "cluster-0"))
    shared = {k: v for k, v in api.items() if k.startswith(("VERITRAIN_", "AWS_"))}

    assert shared == {k: v for k, v in coordinator.items() if k.startswith(("VERITRAIN_", "AWS_"))}
    assert shared["VERITRAIN_DATABASE_URL"].startswith("postgresql://")
    assert "@postgres:5432/" in shared["VERITRAIN_DATABASE_URL"]
    assert shared["VERITRAIN_STORE_URL"].startswith("s3://")
    assert shared["AWS_ENDPOINT_URL"] == "http://s3:8333"


def test_every_cluster_reaches_the_store_and_only_cluster_0_the_ledger(
    compose: dict[str, Any],
) -> None:
    """Cluster 0 alone appends to the ledger; every cluster uploads its own files."""
    api = environment(compose["services"]["api"])
    other = environment(compose["services"]["cluster-1"])

    assert "VERITRAIN_DATABASE_URL" not in other
    for key in (
        "VERITRAIN_STORE_URL",
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ):
        assert other[key] == api[key]
    depends = compose["services"]["cluster-1"]["depends_on"]
    assert "postgres" not in depends and "lighthouse" in depends


def test_two_clusters_meet_at_the_lighthouse_each_with_its_own_keys(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    lighthouse = command(services["lighthouse"])
    port = re.search(r"--port (\d+)", lighthouse)
    assert port is not None and "--host 0.0.0.0" in lighthouse
    url = f"http://lighthouse:{port.group(1)}"
    key_volumes = []
    for j, name in enumerate(CLUSTERS):
        service = services[name]
        line = command(service)
        assert re.search(rf"veritrain train .*--cluster {j} --lighthouse {re.escape(url)}", line), (
            line
        )
        assert "--run-id compose-demo" in line
        assert services[name]["depends_on"]["lighthouse"]["condition"] == "service_healthy"
        key_volumes.append(
            {
                v.split(":")[0]
                for v in service["volumes"]
                if v.endswith(":/var/lib/veritrain/cluster-keys")
            }
        )
    assert "--clusters 2" in command(services["cluster-0"])
    assert "--preset" not in command(services["cluster-1"])  # it takes cluster 0's configuration
    assert all(len(v) == 1 for v in key_volumes) and key_volumes[0].isdisjoint(key_volumes[1])
    assert str(int(port.group(1)) + 1) in str(
        services["lighthouse"]["healthcheck"]["test"]
    )  # the run channel


def test_the_settings_accept_the_compose_values(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in environment(compose["services"]["api"]).items():
        # ${VAR:-default} is compose interpolation: use the default, as compose would.
        monkeypatch.setenv(key, re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value))
    from veritrain.settings import load_settings

    settings = load_settings()
    assert settings.store_url == "s3://veritrain/objects"
    assert settings.s3_presign_downloads is False
    assert settings.database_url == "postgresql://veritrain:veritrain@postgres:5432/veritrain"


def test_the_database_credentials_match_the_postgres_service(compose: dict[str, Any]) -> None:
    postgres = compose["services"]["postgres"]["environment"]
    url = environment(compose["services"]["api"])["VERITRAIN_DATABASE_URL"]

    assert (
        url
        == f"postgresql://{postgres['POSTGRES_USER']}:{postgres['POSTGRES_PASSWORD']}@postgres:5432/{postgres['POSTGRES_DB']}"
    )


def test_the_api_migrates_then_serves_and_cluster_0_records_a_tiny_run(
    compose: dict[str, Any],
) -> None:
    api, coordinator = compose["services"]["api"], compose["services"]["cluster-0"]

    assert re.search(
        r"veritrain db upgrade && exec veritrain serve --host 0\.0\.0\.0", command(api)
    )
    assert re.search(
        r"veritrain db upgrade && exec veritrain train --preset tiny", command(coordinator)
    )
    assert "8000:8000" in api["ports"]
    assert all(compose["services"][name].get("restart") == "no" for name in CLUSTERS)


def test_dependencies_name_existing_services_and_wait_for_health(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on unknown service {dependency}"
            assert condition["condition"] in ("service_healthy", "service_completed_successfully")
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], (
                    f"{dependency} has no healthcheck to wait for"
                )


def test_the_s3_identities_match_the_clients_credentials(compose: dict[str, Any]) -> None:
    identities = compose["configs"]["s3-identities"]["content"]
    env = environment(compose["services"]["api"])

    assert env["AWS_ACCESS_KEY_ID"] in identities and env["AWS_SECRET_ACCESS_KEY"] in identities


def test_the_image_is_python_3_11_slim_with_pinned_cpu_torch() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    makefile = (ROOT / "Makefile").read_text()

    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.M)
    torch = re.search(r"^TORCH\s*:= ([0-9.]+)$", makefile, re.M)  # make test/demo's own pin
    assert torch is not None
    # The package itself asks only a lower bound: installed into a CUDA environment, pip keeps
    # the torch it finds there.
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.findall(r'"torch[<>=!~ ][^"]*"', pyproject) == ['"torch>=2.7"']
    assert (
        f"pip install torch=={torch.group(1)} --index-url https://download.pytorch.org/whl/cpu"
        in dockerfile
    )
    for package in PACKAGES:  # every package the run's code digest covers
        assert f"COPY {package} ./{package}" in dockerfile
