"""`dispatch simulate` refuses what it cannot honour with one line and a non-zero exit, before any run:
traces with non-finite or absurd numbers, plots it cannot write, estimate errors out of range, options
the way it runs would drop, and clusters too big to build. Run in-process through `dispatcher.cli.main`,
as the `dispatch` command runs it (the same one line, the same exit code)."""

from __future__ import annotations

import json
import sys
import warnings

import pytest

from dispatcher.cli import main
from dispatcher.core.errors import InvalidRequestError
from dispatcher.sim.nodes import make_nodes
from dispatcher.sim.workload import MAX_CLUSTER_GPUS, EstimateModel, parse_trace

H = "job_id,submit_time_s,user,num_gpus,duration_s,gpu_type,priority"
T1 = f"{H}\na,0,u,1,10,,\nb,5,u,2,30,,low\n"


def dispatch(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `dispatch ARGS`."""
    monkeypatch.setattr(sys, "argv", ["dispatch", *map(str, args)])
    with pytest.raises(SystemExit) as e:
        main()
    got = capsys.readouterr()
    return e.value.code, got.out, got.err


def refused(monkeypatch, capsys, *args) -> str:
    """The one line `dispatch ARGS` fails with; it ran nothing (no table on stdout)."""
    code, out, err = dispatch(monkeypatch, capsys, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert "internal error" not in err and err.startswith("dispatch: error: "), err
    return err.strip()


@pytest.fixture
def t1(tmp_path):
    path = tmp_path / "t1.csv"
    path.write_text(T1)
    return path


# -- 1. the trace's numbers --------------------------------------------------------------------------------------

@pytest.mark.parametrize("row,words", [
    ("a,nan,u,1,10,,", "t.csv:2: submit_time_s must be a finite number"),
    ("a,inf,u,1,10,,", "t.csv:2: submit_time_s must be a finite number"),
    ("a,-inf,u,1,10,,", "t.csv:2: submit_time_s must be a finite number"),
    ("a,0,u,1,nan,,", "t.csv:2: duration_s must be a finite number"),
    ("a,0,u,1,inf,,", "t.csv:2: duration_s must be a finite number"),
    ("a,0,u,nan,10,,", "t.csv:2: num_gpus must be a whole number"),
    ("a,0,u,inf,10,,", "t.csv:2: num_gpus must be a whole number"),
    ("a,0,u,1.5,10,,", "t.csv:2: num_gpus must be a whole number, got '1.5'"),
    ("a,0,u,99999999999999999999999,10,,", "t.csv:2: num_gpus 99999999999999999999999 is more than 100,000"),
    ("a,0,u,1e9,10,,", "t.csv:2: num_gpus 1e9 is more than 100,000"),
    ("a,1e300,u,1,10,,", "t.csv:2: submit_time_s 1e300 is more than 100 years"),
    ("a,0,u,1,1e10,,", "t.csv:2: duration_s 1e10 is more than 100 years"),
    ("a,x,u,1,10,,", "t.csv:2: submit_time_s must be a number of seconds, got 'x'"),
    ("a,-1,u,1,10,,", "t.csv:2: submit_time_s must be >= 0"),
    ("a,0,u,-1,10,,", "t.csv:2: num_gpus must be >= 0"),
    ("a,0,u,1,0,,", "t.csv:2: duration_s must be > 0"),
    (",0,u,1,10,,", "t.csv:2: job_id is empty"),
])
def test_a_bad_number_in_a_trace_names_the_file_the_line_and_the_column(row, words):
    with pytest.raises(InvalidRequestError) as e:
        parse_trace(f"{H}\n{row}\n", name="t.csv")
    assert words in str(e.value), str(e.value)


def test_whole_numbers_written_as_floats_and_the_largest_values_are_read():
    jobs = parse_trace(f"{H}\na,3153600000,u,2.0,3153600000,,\nb,0,u,100000,1,,\n")
    assert [(j.job_id, j.gpus, j.submit_s) for j in jobs] == [("b", MAX_CLUSTER_GPUS, 0.0), ("a", 2, 3153600000.0)]


def test_a_repeated_job_id_names_its_line_and_the_first():
    with pytest.raises(InvalidRequestError, match=r"^t.csv:4: job_id 'a' repeats \(first on line 2\)$"):
        parse_trace(f"{H}\na,0,u,1,10,,\nb,1,u,1,10,,\na,3,u,1,10,,\n", name="t.csv")


def test_a_trace_excel_saved_with_a_byte_order_mark_is_read(tmp_path, monkeypatch, capsys):
    assert parse_trace("\ufeff" + T1) == parse_trace(T1)
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + T1.encode())
    code, out, err = dispatch(monkeypatch, capsys, "simulate", path, "--gpus", 4, "--json")
    assert code == 0 and json.loads(out)["jobs"] == 2, err


def test_a_nan_submit_time_and_a_file_that_is_not_utf8_get_one_line(tmp_path, monkeypatch, capsys):
    path = tmp_path / "nansub.csv"
    path.write_text(f"{H}\na,nan,u,1,10,,\n")
    assert "nansub.csv:2: submit_time_s must be a finite number" in refused(monkeypatch, capsys, "simulate", path,
                                                                             "--gpus", 4)
    path = tmp_path / "utf16.csv"
    path.write_bytes(T1.encode("utf-16"))
    assert "utf16.csv: not UTF-8 text" in refused(monkeypatch, capsys, "simulate", path, "--gpus", 4)


# -- 2. --plot, --est-error, --ckpt-cost, --time-scale, and the --debug the error message points at --------------

@pytest.mark.parametrize("name,words", [
    ("nosuch/dir/x.png", "no folder"), ("x.txt", "cannot write a .txt file"), ("x", "without a suffix")])
def test_a_plot_it_cannot_write_is_refused_before_the_run(tmp_path, t1, monkeypatch, capsys, name, words):
    pytest.importorskip("matplotlib")
    err = refused(monkeypatch, capsys, "simulate", t1, "--gpus", 4, "--plot", tmp_path / name)
    assert f"--plot {tmp_path / name}: " in err and words in err, err


def test_a_plot_can_be_svg_or_pdf(tmp_path, t1, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    for name in ("x.svg", "x.pdf"):
        code, out, err = dispatch(monkeypatch, capsys, "simulate", t1, "--gpus", 4, "--plot", tmp_path / name)
        assert code == 0 and (tmp_path / name).stat().st_size > 0 and f"plot in {tmp_path / name}" in out, err


def test_a_plot_of_a_run_where_no_job_finished_prints_no_warning(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    huge = tmp_path / "huge.csv"
    huge.write_text(f"{H}\na,0,u,16,100,,\n")  # 16 GPUs on 8: never starts, so no curve to label
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # what the user saw: matplotlib's UserWarning on stderr
        code, out, err = dispatch(monkeypatch, capsys, "simulate", huge, "--gpus", 8, "--plot", tmp_path / "p.png")
    assert code == 0 and (tmp_path / "p.png").stat().st_size > 0 and err == "", err


@pytest.mark.parametrize("spec", ["lognormal:1e308", "lognormal:nan", "lognormal:inf", "lognormal:-1", "lognormal:0",
                                  "lognormal:5.5"])
def test_an_estimate_error_out_of_range_is_refused(t1, monkeypatch, capsys, spec):
    with pytest.raises(InvalidRequestError, match="SIGMA must be above 0 and at most 5"):
        EstimateModel.parse(spec)
    assert "--est-error" in refused(monkeypatch, capsys, "simulate", t1, "--gpus", 4, "--est-error", spec)


def test_sigma_up_to_5_is_taken():
    assert EstimateModel.parse("lognormal:5") == EstimateModel("lognormal", 5.0)
    assert EstimateModel.parse("lognormal:0.25") == EstimateModel("lognormal", 0.25)


@pytest.mark.parametrize("args,words", [
    (["--ckpt-cost", "1e300,1e300"], "--ckpt-cost: '1e300,1e300': a save or restore of more than 1d"),
    (["--ckpt-cost", "30s"], "--ckpt-cost: '30s' is not SAVE,RESTORE; give both durations, e.g. 30s,30s (or 30s,0 "
                             "for no restore)"),  # was: a save of 30 s and no restore, silently
    (["--ckpt-cost", "30s,"], "--ckpt-cost: '30s,' is not SAVE,RESTORE"),
    (["--ckpt-cost", "1s,2s,3s"], "--ckpt-cost: '1s,2s,3s' is not SAVE,RESTORE"),
    (["--time-scale", "nan"], "--time-scale: give a number from 0.001 to 1000"),
])
def test_checkpoint_costs_and_time_scales_out_of_range_are_refused(t1, monkeypatch, capsys, args, words):
    assert words in refused(monkeypatch, capsys, "simulate", t1, "--gpus", 4, *args)


def test_the_internal_error_hint_names_a_debug_flag_simulate_takes(t1, monkeypatch, capsys):
    import dispatcher.sim.compare

    def broken(*a, **kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(dispatcher.sim.compare, "simulate", broken)
    code, _, err = dispatch(monkeypatch, capsys, "simulate", t1, "--gpus", 4)
    assert code == 1 and "internal error: RuntimeError: boom (rerun with --debug for details)" in err, err
    monkeypatch.setattr(sys, "argv", ["dispatch", "simulate", str(t1), "--gpus", "4", "--debug"])
    with pytest.raises(RuntimeError, match="boom"):  # the traceback the hint promised
        main()


# -- 3. options the way it runs would drop ------------------------------------------------------------------------

@pytest.mark.parametrize("args,words", [
    (["--export", "DIR"], "--export needs --suite"),
    (["--workloads", "lab"], "--workloads needs --suite"),
    (["--traces", "DIR"], "--traces needs --suite"),
    (["--policy", "las", "--compare", "fifo"], "give --policy NAME or --compare NAME,NAME,..., not both"),
    (["--nodes", "2x8xA100-80GB"], "give the cluster as --gpus N [--gpus-per-node G] or as --nodes SPEC, not both"),
    (["--suite"], "give a TRACE or --suite, not both"),
])
def test_an_option_a_trace_run_would_drop_is_refused(tmp_path, t1, monkeypatch, capsys, args, words):
    monkeypatch.chdir(tmp_path)
    assert words in refused(monkeypatch, capsys, "simulate", t1, "--gpus", 8, *args)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t1.csv"]


@pytest.mark.parametrize("args,words", [
    (["--suite", "--gpus", "8"], "--gpus does nothing with --suite (each week runs on its own cluster)"),
    (["--suite", "--nodes", "1x8xA100-80GB"], "--nodes does nothing with --suite"),
    (["--suite", "--plot", "x.png"], "--plot does nothing with --suite"),
    (["--suite", "--time-scale", "2"], "--time-scale does nothing with --suite"),
    (["--suite", "--policy", "las", "--compare", "fifo"], "not both"),
    (["--suite", "--export", "DIR", "--compare", "las"], "--compare does nothing with --export"),
    (["--suite", "--export", "DIR", "--out", "x.json"], "--out does nothing with --export"),
    (["--nodes", "1x8xA100-80GB", "--gpus-per-node", "4", "t.csv"], "(--gpus-per-node with --nodes)"),
])
def test_an_option_the_suite_would_drop_is_refused(tmp_path, monkeypatch, capsys, args, words):
    monkeypatch.chdir(tmp_path)
    assert words in refused(monkeypatch, capsys, "simulate", *args)
    assert list(tmp_path.iterdir()) == []


def test_out_without_suite_writes_what_json_prints(tmp_path, t1, monkeypatch, capsys):
    out = tmp_path / "r.json"
    code, printed, err = dispatch(monkeypatch, capsys, "simulate", t1, "--gpus", 4, "--json", "--out", out)
    assert code == 0 and json.loads(out.read_text()) == json.loads(printed), err
    code, printed, err = dispatch(monkeypatch, capsys, "simulate", t1, "--gpus", 4, "--out", tmp_path / "t.json")
    assert code == 0 and f"JSON in {tmp_path / 't.json'}" in printed
    assert json.loads((tmp_path / "t.json").read_text())["policies"]["dispatch"]["finished"] == 2
    # a folder that is not there: one line before the run (as --plot), not after a long comparison
    code, printed, err = dispatch(monkeypatch, capsys, "simulate", t1, "--gpus", 4, "--out", tmp_path / "no/r.json")
    assert code == 2 and printed == "" and err == f"dispatch: error: --out {tmp_path / 'no/r.json'}: no folder " \
        f"{tmp_path / 'no'}\n", err


# -- 4. clusters too big to build ---------------------------------------------------------------------------------

@pytest.mark.parametrize("args,words", [
    (["--nodes", "100000000x8xA100-80GB"], "--nodes: 100000000x8xA100-80GB is more than 100,000 GPUs"),
    (["--nodes", "12500x8xA100-80GB,1x1xV100-16GB"], "is more than 100,000 GPUs"),
    (["--gpus", "10000000"], "10000000 is not in the range 1<=x<=100000"),
])
def test_a_cluster_over_100000_gpus_is_refused_at_once(t1, monkeypatch, capsys, args, words):
    assert words in refused(monkeypatch, capsys, "simulate", t1, *args)


@pytest.mark.parametrize("spec,words", [
    # what `up --fake-gpus` reads as one node of 8, and --nodes read as 8 nodes of one GPU, silently
    ("8xA100-80GB", "--nodes: '8xA100-80GB' gives no GPUS per node; the form is NODESxGPUSxTYPE: write 1x8xA100-80GB "
                    "for one node of 8 GPUs, or 8x1xA100-80GB for 8 nodes of one"),
    ("2x8xA100-80GB,2xV100-16GB+2xT4:16", "'2xV100-16GB+2xT4:16' gives no GPUS per node; the form is NODESxGPUSxTYPE: "
                                          "write 1x2xV100-16GB+2xT4:16 for one node of 4 GPUs"),
    ("1x2xA100-40GB+V100-16GB", "'1x2xA100-40GB+V100-16GB' is not NODESxGPUSxTYPE (a node of mixed GPUs: GPUSxTYPE"),
    ("0x8xA100-80GB", "--nodes: '0x8xA100-80GB': node count 0 is out of range; give at least 1 node"),
], ids=["two-parts", "mixed-two-parts", "mixed-part-uncounted", "no-nodes"])
def test_a_nodes_part_that_is_not_nodes_x_gpus_x_type_is_refused_with_the_form_to_write(t1, monkeypatch, capsys,
                                                                                       spec, words):
    assert words in refused(monkeypatch, capsys, "simulate", t1, "--nodes", spec)


def test_the_documented_nodes_forms_build_their_nodes():
    assert [len(g) for _, g in make_nodes("2x8xA100-80GB,1x2xA100-40GB+2xV100-16GB,1x8xG2:24", None)] == [8, 8, 4, 8]


def test_make_nodes_bounds_the_cluster_before_it_builds_a_node():
    assert sum(len(g) for _, g in make_nodes("12500x8xA100-80GB", None)) == MAX_CLUSTER_GPUS
    for spec, gpus in (("100000000x8xA100-80GB", None), (None, MAX_CLUSTER_GPUS + 1)):
        with pytest.raises(InvalidRequestError, match="more than 100,000"):
            make_nodes(spec, gpus)
    with pytest.raises(InvalidRequestError, match="not both"):
        make_nodes("1x8xA100-80GB", 8)


# -- 5. a shared trace missing from --traces ------------------------------------------------------------------

def test_a_suite_week_whose_trace_is_not_in_the_traces_folder_is_refused_not_left_off_the_card(
        tmp_path, monkeypatch, capsys):
    (tmp_path / "philly_week.csv").write_text(T1)  # the shared folder's layout: alibaba's week in a subfolder
    err = refused(monkeypatch, capsys, "simulate", "--suite", "--export", tmp_path / "w", "--traces", tmp_path)
    assert f"--traces: no alibaba_gpu2023_week.csv in {tmp_path} (the alibaba week)" in err, err
    assert "leave the week out with --workloads" in err and not (tmp_path / "w").exists()
    code, out, err = dispatch(monkeypatch, capsys, "simulate", "--suite", "--export", tmp_path / "w", "--traces",
                              tmp_path, "--workloads", "philly")
    assert code == 0 and (tmp_path / "w" / "philly.csv").is_file(), err


# -- 6. nothing to run: no policy, no job ---------------------------------------------------------------------

@pytest.mark.parametrize("args,words", [
    (["--compare", ","], "--compare: no policy named"),
    (["--compare", ""], "--compare: no policy named"),  # was: the --policy default, as if --compare were not given
    (["--policy", ""], "--policy: no policy named"),
    (["--compare", "fifo,,dispatch"], "--compare: 'fifo,,dispatch' has an empty name; give the policies with one "
                                      "comma between each, e.g. fifo,dispatch"),
    (["--compare", "fifo,"], "--compare: 'fifo,' has an empty name"),
    (["--compare", "fifo,fifo"], "--compare: 'fifo' is named twice; name each policy once"),  # was: one row
], ids=["comma", "empty-compare", "empty-policy", "empty-name", "trailing-comma", "twice"])
def test_an_empty_policy_list_is_refused_not_an_empty_table(t1, monkeypatch, capsys, args, words):
    assert words in refused(monkeypatch, capsys, "simulate", t1, "--gpus", 4, *args)


def test_a_trace_with_only_its_header_is_refused_not_a_table_of_zeros(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "none.csv"
    empty.write_text(H + "\n")  # what `dispatch history --csv` prints when nothing finished
    assert "none.csv: no jobs in this trace, only its header" in refused(monkeypatch, capsys, "simulate", empty,
                                                                         "--gpus", 4)


def test_a_policy_file_of_any_name_the_live_scheduler_reads_is_read_here_too(tmp_path, t1, monkeypatch, capsys):
    # `dispatch up --policy lab-policy` ran it live; `simulate --policy lab-policy` said "unknown policy"
    for name in ("lab-policy", "lab.TOML"):
        (tmp_path / name).write_text("[defaults]\npreemption = false\n")
        code, printed, err = dispatch(monkeypatch, capsys, "simulate", t1, "--gpus", 4, "--policy", tmp_path / name)
        assert code == 0 and f"{tmp_path / name} " in printed, err
    code, printed, err = dispatch(monkeypatch, capsys, "simulate", t1, "--gpus", 4, "--policy", tmp_path / "none")
    assert code == 2 and "unknown policy" in err and "the path of a policy file" in err, err


@pytest.mark.parametrize("weeks", ["daytime,daytime", "daytime,,pretrain"])
def test_a_week_named_twice_or_an_empty_name_is_refused_as_compare_refuses_them(monkeypatch, capsys, weeks):
    # the suite ran the week once, silently
    code, printed, err = dispatch(monkeypatch, capsys, "simulate", "--suite", "--workloads", weeks)
    assert code == 2 and printed == "" and "--workloads" in err and "twice" in err, err


def test_a_replay_keeps_the_team_column_so_team_limits_hold_as_they_do_live(tmp_path, monkeypatch, capsys):
    # `dispatch history --csv` writes each job's team; the replay dropped it, so a team's limit_gpus held nothing
    trace = tmp_path / "teams.csv"
    trace.write_text(f"{H},state,exit_code,team\na,0,u1,2,100,,,succeeded,0,vision\nb,0,u1,2,100,,,succeeded,0,vision\n"
                     "c,0,u2,2,100,,,succeeded,0,nlp\n")
    results = {}
    for limit in (2, 1):
        policy = tmp_path / f"limit{limit}.toml"
        policy.write_text(f"[teams.vision]\nlimit_gpus = {limit}\n")
        code, printed, err = dispatch(monkeypatch, capsys, "simulate", trace, "--gpus", 8, "--policy", policy,
                                      "--est-error", "none", "--json")
        assert code == 0, err
        results[limit] = json.loads(printed)["policies"][str(policy)]
    assert results[2]["finished"] == 3 and results[2]["makespan_s"] == 200.0, results[2]  # b waits for a
    assert results[1]["finished"] == 1, results[1]  # vision's 2-GPU jobs never fit under a limit of 1
