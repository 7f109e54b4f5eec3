"""Issue 17, class 5: untrusted text. A NodeReport, the running controller or an API server may
say anything; what they say reaches a terminal, a log, the markdown plan posted as a pull-request
comment and the HTML report only as inert, capped text (``reconciler.guard.untrusted``). Each test is
the attack: terminal escapes (OSC title, clear screen, CSI colour, a C1 CSI), a bidi override, a
1 MB string, markdown links, images, HTML, @mentions and code fences."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import reporthelp
import yaml
from clihelp import ROOT, run_main
from kubehelp import example_on
from markdown_it import MarkdownIt
from reporthelp import Page, evil_fleet

from reconciler.engine.passes import EventLog
from reconciler.guard import untrusted
from reconciler.views import report

#: A fabric status that tries everything at once.
ATTACK = ("\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m\x9b1m\u202eevil\u2066 [click](https://evil.example) "
          "![x](https://evil.example/i.png) <img src=x onerror=alert(1)> @org/team #1 www.evil.example\n"
          "```\n| x |")
#: What every human view shows of it: each control and bidi character as its escape.
SHOWN = ("\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mred\\x1b[0m\\x9b1m\\u202eevil\\u2066 [click](https://evil.example) "
         "![x](https://evil.example/i.png) <img src=x onerror=alert(1)> @org/team #1 www.evil.example\\x0a"
         "```\\x0a| x |")
FORBIDDEN = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066")


def _fleet(tmp_path: Path, status: str, monkeypatch) -> Path:
    monkeypatch.setattr(reporthelp, "EVIL", status)
    return evil_fleet(tmp_path)


def _plan(capsys, intent: Path, tmp_path: Path, *extra: object):
    return run_main(capsys, "plan", "-f", intent, "--state-dir", tmp_path / "state", "--offline", *extra)


# ---- the module -----------------------------------------------------------------------------------

def test_shown_escapes_every_control_and_bidi_character_and_keeps_plain_text():
    assert untrusted.shown(ATTACK) == SHOWN
    assert untrusted.shown("tab\tkept, \u00e9 and \u2014 too") == "tab\tkept, \u00e9 and \u2014 too"
    assert untrusted.shown("\x00\x7f\x85\u2028\U000e0001") == "\\x00\\x7f\\x85\\u2028\\U000e0001"
    assert untrusted.shown(untrusted.shown(ATTACK)) == SHOWN  # a second pass changes nothing


def test_a_megabyte_is_cut_to_the_cap_with_a_visible_marker():
    big = "\x1b" + "A" * (1024 * 1024)
    assert untrusted.shown(big) == "\\x1b" + "A" * 2047 + "…(+1046529 chars)"
    assert untrusted.shown("n" * 300, untrusted.MAX_FIELD_CHARS) == "n" * 256 + "…(+44 chars)"
    assert untrusted.shown("n" * 2048) == "n" * 2048  # at the cap: whole


def _md() -> MarkdownIt:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _inline_tokens(text: str) -> list:
    return [c for t in _md().parse(text) for c in (t.children or [])]


def test_markdown_makes_links_images_html_mentions_and_urls_literal():
    md = untrusted.markdown(ATTACK)
    assert md == ("\\\\x1b\\]0;pwned\\\\x07\\\\x1b\\[2J\\\\x1b\\[31mred\\\\x1b\\[0m\\\\x9b1m\\\\u202eevil\\\\u2066 "
                  "\\[click\\](https:&#8203;//evil.example) !\\[x\\](https:&#8203;//evil.example/i.png) "
                  "\\<img src=x onerror=alert(1)\\> @&#8203;org/team #&#8203;1 www&#8203;.evil.example\\\\x0a"
                  "\\`\\`\\`\\\\x0a\\| x \\|")
    kinds = {t.type for t in _inline_tokens(md)}
    assert kinds == {"text"}, kinds  # no link, image, html, code or emphasis
    # it reads as the characters shown, with a zero-width space after @, # and the URL schemes
    rendered = "".join(t.content for t in _inline_tokens(md))
    assert rendered == SHOWN.replace("@", "@\u200b").replace("#", "#\u200b").replace("://", ":\u200b//").replace(
        "www", "www\u200b")


def test_a_code_span_and_a_fence_cannot_be_closed_from_inside():
    assert untrusted.code_span("a``b|c") == "```a``b\\|c```"
    assert untrusted.code_span("`x`") == "`` `x` ``"
    [span] = [t for t in _inline_tokens(untrusted.code_span("a``b")) if t.type == "code_inline"]
    assert span.content == "a``b"
    block = untrusted.fence(["+x", " ````", "```"], "diff")
    assert block == ["`````diff", "+x", " ````", "```", "`````"]
    [code] = [t for t in _md().parse("\n".join(block + ["after"])) if t.type == "fence"]
    assert code.content == "+x\n ````\n```\n"


# ---- through the views --------------------------------------------------------------------------

def test_the_text_plan_shows_the_status_as_inert_text(tmp_path, capsys, monkeypatch):
    res = _plan(capsys, _fleet(tmp_path, ATTACK, monkeypatch), tmp_path)
    assert res.rc == 2, res
    line = f"  warning: [tray-fabric-incomplete] tray gb-r03-n07 of slice r03/s0: fabric status {SHOWN}"
    assert line in res.out.splitlines()
    assert not any(c in res.out for c in FORBIDDEN)


def test_the_markdown_plan_shows_the_status_as_literal_text(tmp_path, capsys, monkeypatch):
    res = _plan(capsys, _fleet(tmp_path, ATTACK, monkeypatch), tmp_path, "--format", "markdown")
    assert res.rc == 2, res
    assert not any(c in res.out for c in FORBIDDEN)
    tokens = _md().parse(res.out)
    inline = [c for t in tokens for c in (t.children or [])]
    assert not {t.type for t in inline} & {"link_open", "image", "html_inline"}
    assert not [t for t in tokens if t.type == "html_block" and "img" in t.content]
    cells = ["".join(c.content for c in (t.children or [])) for t in tokens if t.type == "inline"]
    status = next(c for c in cells if c.startswith("tray gb-r03-n07"))
    assert status == "tray gb-r03-n07 of slice r03/s0: fabric status " + SHOWN.replace("@", "@\u200b").replace(
        "#", "#\u200b").replace("://", ":\u200b//").replace("www", "www\u200b")
    assert sum(t.type == "table_open" for t in tokens) == 3  # changes, node states, diagnostics: no table broken


def test_a_fence_in_a_live_file_does_not_close_the_diff_block(tmp_path, capsys, monkeypatch):
    intent = _fleet(tmp_path, "Success", monkeypatch)
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "topology.conf").write_text("# hand edit\n```\n<img src=x onerror=alert(1)>\n")
    res = _plan(capsys, intent, tmp_path, "--format", "markdown")
    assert res.rc == 2, res
    tokens = _md().parse(res.out)
    diff = next(t for t in tokens if t.type == "fence" and "topology.conf" in t.content)
    assert diff.markup == "````" and "-```\n-<img src=x onerror=alert(1)>\n" in diff.content
    assert not [t for t in tokens if t.type == "html_block" and "img" in t.content]


def test_the_html_report_holds_no_control_or_bidi_character(tmp_path, capsys, monkeypatch):
    res = run_main(capsys, "report", "-f", _fleet(tmp_path, ATTACK, monkeypatch), "--state-dir", tmp_path / "s")
    assert res.rc == 0, res
    assert not any(c in res.out for c in FORBIDDEN)
    page = Page(res.out)
    assert "script" not in {tag for tag, _ in page.tags} and "img" not in {tag for tag, _ in page.tags}
    assert page.tray("gb-r03-n07")["title"] == (f"fabric-incomplete: fabric status {SHOWN}\n"
                                                "rackctl: fabric-incomplete; controller not read")


def test_a_megabyte_status_is_refused_where_it_is_read(tmp_path, capsys, monkeypatch):
    intent = _fleet(tmp_path, "\x1b" + "S" * (1024 * 1024), monkeypatch)
    res = _plan(capsys, intent, tmp_path)
    assert (res.rc, res.out) == (1, "")
    assert res.err == (f"error: {tmp_path / 'inventory.json'}: nodes[6].gpus[3].fabric.status: 1,048,577 characters; "
                       "expected at most 256 characters\n")


def test_a_megabyte_message_is_capped_in_every_human_view(tmp_path, monkeypatch):
    # NodeReport fields are bounded where they are read (above); a view still caps what any other
    # source (a controller, an API server, a future reader) puts into a message.
    from reconciler.engine import compute as pipeline
    from reconciler.state.statedir import StateDir
    from reconciler.views.html import render_html
    from reconciler.views.rackview import fleet_view

    intent_path = _fleet(tmp_path, ATTACK, monkeypatch)
    intent = pipeline.load(str(intent_path), inventory=None, config_dir=None)
    run = pipeline.compute(intent, StateDir(tmp_path / "state", intent.name), offline=True)
    big = "tray gb-r03-n07 of slice r03/s0: fabric status \x1b" + "S" * (1024 * 1024)
    diags = [dataclasses.replace(d, message=big) if d.code == "tray-fabric-incomplete" else d
             for d in run.plan.diagnostics]
    plan = dataclasses.replace(run.plan, diagnostics=diags)
    text = report.render(plan, "text")
    line = "  warning: [tray-fabric-incomplete] " + big  # the text view caps each line at 2,048
    assert len(text) < 8_000, len(text)
    assert line[:2048].replace("\x1b", "\\x1b") + f"…(+{len(line) - 2048} chars)" in text
    markdown = report.render(plan, "markdown")  # each value at most 2,048
    assert len(markdown) < 8_000, len(markdown)
    shown = big[:2048].replace("\x1b", "\\\\x1b")
    assert f"| warning | `tray-fabric-incomplete` | {shown}…(+{len(big) - 2048} chars) |" in markdown
    page = render_html(fleet_view(run), plan)
    assert len(page) < len(big) and "\x1b" not in page
    assert json.loads(report.render(plan, "json"))["diagnostics"][[d.code for d in diags].index(
        "tray-fabric-incomplete")]["message"] == big  # the data stays exact


def test_an_api_server_error_reaches_the_terminal_inert(kube, tmp_path, capsys, monkeypatch):
    from kubernetes.client import ApiClient
    from kubernetes.client.exceptions import ApiException

    def forbidden(*args, **kwargs):
        exc = ApiException(status=403, reason="Forbidden")
        exc.body = json.dumps({"kind": "Status", "message": "nodes is forbidden\x1b]0;pwned\x07\x1b[2J\u202e"})
        raise exc

    _, args = example_on(kube, tmp_path)
    monkeypatch.setattr(ApiClient, "call_api", forbidden)
    res = run_main(capsys, "plan", *args)
    assert res.rc == 1 and res.out == "", res
    assert not any(c in res.err for c in FORBIDDEN), res
    server = yaml.safe_load(Path(kube.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    assert res.err.splitlines() == [f"error: kubernetes: discover API groups: HTTP 403 from {server}: nodes is "
                                    "forbidden\\x1b]0;pwned\\x07\\x1b[2J\\u202e",
                                    "  hint: rackctl's account lacks a permission (see "
                                    "examples/kubernetes/reconciler-rbac.yaml)"]


def test_a_node_label_value_from_the_api_server_is_shown_inert(kube, tmp_path, capsys):
    _, args = example_on(kube, tmp_path, **{"rackctl.dev/tier.train": "x\x1b[2J\u202e"})
    res = run_main(capsys, "plan", *args)
    assert res.rc == 2, res
    assert not any(c in res.out for c in FORBIDDEN), res
    assert "\\x1b[2J\\u202e" in res.out


def test_a_saved_plan_file_quoted_in_an_error_is_inert(tmp_path, capsys):
    planfile = tmp_path / "plan.json"
    planfile.write_text(json.dumps({"format_version": "1", "error": "boom\x1b]0;pwned\x07\nhint: fake"}))
    intent = evil_fleet(tmp_path)
    res = run_main(capsys, "apply", "-f", intent, "--plan", planfile, "--state-dir", tmp_path / "s")
    assert res.rc == 1, res
    assert res.err.splitlines()[0] == (f"error: {planfile}: holds a failed run, not a plan: boom\\x1b]0;pwned\\x07")
    assert "\x1b" not in res.err


def test_a_text_event_line_carries_no_escape(capsys):
    log = EventLog("text")
    log.event("error", "pass-result", "c1", error="\x1b[2Jboom", node="gb\x1b]0;x\x07")
    line = capsys.readouterr().err
    assert line.split(" ", 1)[1] == 'ERROR pass-result cluster=c1 error="\\u001b[2Jboom" node="gb\\u001b]0;x\\u0007"\n'


# ---- the markdown plan fits one comment -----------------------------------------------------------

def test_an_800_rack_markdown_plan_fits_a_comment_and_names_the_artifact(tmp_path, capsys):
    intent, inventory = tmp_path / "intent.yaml", tmp_path / "inventory.json"
    assert run_main(capsys, "simulate", "--racks", 800, "--seed", 1, "--unhealthy", 30, "--out", inventory,
                    "--intent", intent).rc == 0
    res = run_main(capsys, "plan", "-f", intent, "--state-dir", tmp_path / "s", "--offline", "--format", "markdown",
                   "--out", tmp_path / "plan.json")
    assert res.rc == 2, res
    assert len(res.out.encode()) <= report.MAX_MARKDOWN_BYTES < 65_536
    full = json.loads((tmp_path / "plan.json").read_text())
    assert ("The full plan is the JSON plan `rackctl plan --out FILE` writes: in the rackctl-plan workflow, the "
            "file `plan.json` of the run's artifact `rackctl-plan`.") in res.out
    lines = res.out.splitlines()
    assert lines[4].startswith("**Plan: files: 5 to add, 0 to change, 0 to remove; blocks: 800 to add")
    [heading] = [x for x in lines if x.startswith("#### Slurm changes")]
    shown, total = (int(w) for w in heading.removeprefix("#### Slurm changes (first ").rstrip(")").split(" of "))
    assert total == len(full["changes"]) == 813 and 600 < shown < total
    rows = [x for x in lines if x.startswith("| + | `slurm/")]
    assert len(rows) == shown
    assert rows[0] == "| + | `slurm/file/topology.conf` | create | intent | file does not exist |"
    tokens = _md().parse(res.out)
    assert sum(t.type == "tr_open" for t in tokens) == shown + 1  # one valid table: its head and the rows


def test_the_pointer_names_the_artifact_the_workflow_uploads():
    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "rackctl-plan.yml").read_text())
    steps = flow["jobs"]["plan"]["steps"]
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["name"] == report.PLAN_ARTIFACT
    assert report.PLAN_ARTIFACT_FILE in upload["with"]["path"].split()
    run = next(s for s in steps if s.get("id") == "plan")["run"]
    assert f"--out {report.PLAN_ARTIFACT_FILE}" in run and "> plan.md" in run
    comment = next(s for s in steps if s.get("name") == "comment on the pull request")["run"]
    assert "--body-file plan.md" in comment  # posted as it is: nothing added around it


def test_a_small_markdown_plan_is_whole(tmp_path, capsys):
    intent, inventory = tmp_path / "intent.yaml", tmp_path / "inventory.json"
    assert run_main(capsys, "simulate", "--racks", 1, "--out", inventory, "--intent", intent).rc == 0
    res = run_main(capsys, "plan", "-f", intent, "--state-dir", tmp_path / "s", "--offline", "--format", "markdown")
    assert "[!NOTE]" not in res.out and "```diff" in res.out and "#### Diagnostics" in res.out


def test_the_placement_proof_shows_what_sbatch_said_inert():
    from reconciler.engine import verify

    row = verify.Row("train", "gb200-train", "slice", "sbatch --test-only -N 9", "fail", "sbatch: " + ATTACK,
                     nodes=("gb-r02-n01\x1b(0\u202e",))
    report = verify.Report("c1", "24.11.5", [row])
    text = verify.render(report, "text")
    assert not any(c in text for c in FORBIDDEN)
    assert f"  FAIL          slice         gb-r02-n01\\x1b(0\\u202e: sbatch: {SHOWN}" in text.splitlines()
    md = verify.render(report, "markdown")
    assert not any(c in md for c in FORBIDDEN)
    row = f"| FAIL | train | gb200-train | slice | `gb-r02-n01\\x1b(0\\u202e` | sbatch: {untrusted.markdown(ATTACK)} |"
    assert row in md
    assert not {t.type for t in _inline_tokens(md)} & {"link_open", "image", "html_inline"}
