"""The launch decision table of ``veritrain train`` (veritrain/record/launch.py): which run
starts, from which configuration, where it records, and which option combinations are refused
before anything is read or run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veritrain.cli.main import app
from veritrain.errors import LaunchError
from veritrain.policy import PolicyChoice
from veritrain.record.launch import (
    ConfigOverrides,
    FileConfig,
    FolderConfig,
    FolderRun,
    JoinedRunConfig,
    LaunchRequest,
    NewLedgerRun,
    PresetConfig,
    ResumeLedgerRun,
    decide_launch,
)
from veritrain.record.placement import ClusterPlacement

LIGHTHOUSE = "http://10.0.0.1:29510"


def test_no_options_start_a_tiny_ledger_run_named_after_the_time() -> None:
    assert decide_launch(LaunchRequest()) == NewLedgerRun(
        config=PresetConfig("tiny"),
        overrides=ConfigOverrides(),
        policy=PolicyChoice(mode="bitwise"),
        placement=None,
        named_after_time=True,
    )


def test_a_config_file_names_the_run_and_the_tolerance_policy_is_kept() -> None:
    plan = decide_launch(LaunchRequest(config=Path("run.toml"), verification="tolerance"))

    assert isinstance(plan, NewLedgerRun)
    assert (plan.config, plan.named_after_time) == (FileConfig(Path("run.toml")), False)
    assert plan.policy == PolicyChoice(mode="tolerance")


def test_a_workdir_records_a_new_run_into_that_folder(tmp_path: Path) -> None:
    overrides = ConfigOverrides(clusters=3, precision="bf16")
    plan = decide_launch(LaunchRequest(preset="small", workdir=tmp_path, overrides=overrides))

    assert plan == FolderRun(
        config=PresetConfig("small"),
        overrides=overrides,
        placement=None,
        workdir=tmp_path,
        resume=None,
    )
    assert plan.out() == tmp_path


def test_resuming_a_folder_takes_its_recorded_configuration_unless_one_is_named(
    tmp_path: Path,
) -> None:
    plan = decide_launch(LaunchRequest(resume=str(tmp_path)))
    assert plan == FolderRun(
        config=FolderConfig(tmp_path),
        overrides=ConfigOverrides(),
        placement=None,
        workdir=None,
        resume=tmp_path,
    )

    named = decide_launch(LaunchRequest(resume=str(tmp_path), preset="tiny"))
    assert isinstance(named, FolderRun)
    assert (named.config, named.resume) == (PresetConfig("tiny"), tmp_path)


def test_resuming_a_run_id_continues_it_from_the_ledger() -> None:
    assert decide_launch(LaunchRequest(resume="crash")) == ResumeLedgerRun("crash", None)
    placed = decide_launch(LaunchRequest(resume="crash", cluster=0, lighthouse=LIGHTHOUSE))
    assert placed == ResumeLedgerRun("crash", ClusterPlacement(0, LIGHTHOUSE))


@pytest.mark.parametrize(
    "request_",
    [
        LaunchRequest(resume="crash", preset="tiny"),
        LaunchRequest(resume="crash", config=Path("run.toml")),
        LaunchRequest(resume="crash", overrides=ConfigOverrides(outer_steps=9)),
        LaunchRequest(resume="crash", overrides=ConfigOverrides(data=(Path("corpus"),))),
        LaunchRequest(resume="crash", overrides=ConfigOverrides(activation_checkpointing=True)),
    ],
)
def test_resuming_a_run_id_refuses_every_training_option(request_: LaunchRequest) -> None:
    with pytest.raises(LaunchError) as caught:
        decide_launch(request_)

    assert str(caught.value) == (
        "--resume RUN_ID continues the run as recorded; drop the other options"
    )


def test_a_cluster_other_than_0_joins_the_run_cluster_0_serves(tmp_path: Path) -> None:
    joined = LaunchRequest(cluster=1, lighthouse=LIGHTHOUSE, overrides=ConfigOverrides(run_id="r"))
    plan = decide_launch(joined)

    assert isinstance(plan, NewLedgerRun)
    assert plan.config == JoinedRunConfig(LIGHTHOUSE, "r")
    assert plan.placement == ClusterPlacement(cluster=1, lighthouse=LIGHTHOUSE)

    into_folder = decide_launch(replace(joined, workdir=tmp_path))
    assert isinstance(into_folder, FolderRun)
    assert into_folder.config == JoinedRunConfig(LIGHTHOUSE, "r")


@pytest.mark.parametrize(
    ("request_", "message", "option"),
    [
        (
            LaunchRequest(verification="bitwize"),
            "expected 'bitwise' or 'tolerance', got 'bitwize'",
            "--verification",
        ),
        (
            LaunchRequest(lighthouse=LIGHTHOUSE),
            "--lighthouse URL needs --cluster J: the cluster this host runs",
            None,
        ),
        (
            LaunchRequest(cluster=1, lighthouse=LIGHTHOUSE),
            "a cluster joining a run names it and its lighthouse: --run-id ID --lighthouse URL",
            None,
        ),
        (
            LaunchRequest(cluster=1, overrides=ConfigOverrides(run_id="r")),
            "a cluster joining a run names it and its lighthouse: --run-id ID --lighthouse URL",
            None,
        ),
        (
            LaunchRequest(cluster=0, lighthouse=LIGHTHOUSE),
            "every cluster of a run on several hosts must name it: pass --run-id",
            None,
        ),
        (
            LaunchRequest(cluster=1, lighthouse=LIGHTHOUSE, preset="tiny"),
            "every cluster of a run on several hosts must name it: pass --run-id",
            None,
        ),
    ],
)
def test_contradicting_options_are_refused_naming_what_to_pass(
    request_: LaunchRequest, message: str, option: str | None
) -> None:
    with pytest.raises(LaunchError) as caught:
        decide_launch(request_)

    assert (str(caught.value), caught.value.option) == (message, option)


def test_the_cli_shows_a_refusal_as_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERITRAIN_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")

    bad_policy = CliRunner().invoke(app, ["train", "--verification", "bitwize"])
    unnamed = CliRunner().invoke(app, ["train", "--cluster", "0", "--lighthouse", LIGHTHOUSE])

    assert bad_policy.exit_code == unnamed.exit_code == 2
    assert (
        "Invalid value for --verification: expected 'bitwise' or 'tolerance', got 'bitwize'"
        in bad_policy.output
    )
    assert (
        "Invalid value: every cluster of a run on several hosts must name it: pass --run-id"
        in unnamed.output
    )
    assert not (tmp_path / "ledger.db").exists()
