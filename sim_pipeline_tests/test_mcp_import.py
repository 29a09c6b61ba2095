"""`sim-pipeline pack from-mcp` (issue 33, item 1): a pack from an MCP server the test starts, written with the
official `mcp` SDK (its MCPServer), over stdio and over streamable HTTP.

The server is a library desk nobody here wrote: camelCase tools, ids like `M-12345` and `LN123456`, annotations that
agree with a tool's name, contradict it, or are missing. The pack it gives must load with the project's loader, keep
each kind's source visible (REVIEW on every guess), and run to a summary with rollouts.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("mcp", reason="the [mcp] extra is not installed (make test installs it)")

from sim_pipeline.cli import main  # noqa: E402
from sim_pipeline.domain import load_domain  # noqa: E402
from sim_pipeline.mcp_import import ServerTool, kind_for  # noqa: E402

SERVER = '''
import sys
from typing import Annotated

from pydantic import Field
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

toolset = sys.argv[1]
server = MCPServer("Riverside Library", instructions="Members borrow, renew and reserve books.\\n**Be kind**: always.")
Member = Annotated[str, Field(pattern="^M-[0-9]{5}$", description="The member's card number: M- and five digits")]
Loan = Annotated[str, Field(pattern="^LN[0-9]{6}$", description="The loan's number: LN and six digits")]
Reservation = Annotated[str, Field(pattern="^R[0-9]{4,6}$", description="The reservation's number")]

if toolset in ("library", "lookahead"):
    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookupMember(member_id: Member) -> dict:
        """Look up a library member's card: name, fines owed and loans."""
        return {}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def listLoans(member_id: Member) -> list:
        """List the books a member has on loan, with their due dates."""
        return []

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
    def renewLoan(loan_id: Loan) -> dict:
        """Renew a loan for two more weeks."""
        return {}

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def cancelReservation(reservation_id: Reservation) -> dict:
        """Cancel a reservation of a book."""
        return {}

    @server.tool()
    def placeReservation(member_id: Member, isbn: Annotated[str, Field(pattern="^97[89][0-9]{10}$")]) -> dict:
        """Reserve a book by its ISBN for a member."""
        return {}

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False))
    def payFine(member_id: Member, amount: Annotated[float, Field(gt=0, le=500)]) -> dict:
        """Settle the fines a member owes, in dollars."""
        return {}

if toolset == "lookahead":  # a pattern RE2 cannot run: the loader refuses the pack
    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def findBook(title: Annotated[str, Field(json_schema_extra={"pattern": "^(?!x).+$"})]) -> list:
        """Find a book by its title."""
        return []

if toolset == "clashing":
    @server.tool(name="get.order", annotations=ToolAnnotations(read_only_hint=True))
    def dotted(order_id: str) -> dict:
        """Look up an order."""
        return {}

    @server.tool(name="message_user")
    def reserved(text: str) -> str:
        """Send a text message to a customer's phone."""
        return ""

    @server.tool(name="getInvoice", annotations=ToolAnnotations(read_only_hint=True))
    def camel(invoice_id: str) -> dict:
        """Show an invoice."""
        return {}

    @server.tool(name="get_invoice", annotations=ToolAnnotations(read_only_hint=True))
    def snake(invoice_id: str) -> dict:
        """Show an invoice, again."""
        return {}

if sys.argv[2:3] == ["http"]:
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[3]))
else:
    server.run()
'''


@pytest.fixture(scope="module")
def server_script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "library_server.py"
    path.write_text(SERVER)
    return path


def stdio(script: Path, toolset: str = "library") -> list[str]:
    return ["--", sys.executable, str(script), toolset]


@pytest.fixture(scope="module")
def library(server_script, tmp_path_factory) -> Path:
    """The library server's pack, imported over stdio (by the command line, as a user would)."""
    packs = tmp_path_factory.mktemp("packs")
    assert main(["pack", "from-mcp", "--name", "riverside", "--out", str(packs), *stdio(server_script)]) == 0
    return packs / "riverside"


def test_the_pack_loads_with_kinds_from_annotations_and_every_guess_flagged(library):
    assert sorted(p.name for p in (library / "tools").iterdir()) == [
        "cancelReservation.json", "listLoans.json", "lookupMember.json", "payFine.json", "placeReservation.json",
        "renewLoan.json"]
    domain = load_domain(library)
    kinds = {t.name: (t.kind, t.declared) for t in domain.tools}
    assert kinds == {
        "lookupMember": ("read", True), "listLoans": ("read", True),  # readOnlyHint, and the name agrees
        "renewLoan": ("update", True),  # additive and idempotent; 'renew' is no verb the names know
        "payFine": ("create", True),  # additive, not idempotent: the name's 'destructive' is ruled out
        "cancelReservation": ("destructive", False),  # destructiveHint agrees with the name; only a name gives it
        "placeReservation": ("create", False),  # no annotations: the loader's guess, which `run` names
    }
    schema = domain.tool("lookupMember").parameters["properties"]["member_id"]
    assert schema["pattern"] == "^M-[0-9]{5}$" and schema["description"].startswith("The member's card number")
    text = (library / "domain.yaml").read_text()
    lines = {line.split(":")[0].strip(" #"): line for line in text.splitlines()}  # tool or key -> its line
    for guessed in ("renewLoan", "payFine", "placeReservation"):
        assert "REVIEW" in lines[guessed], guessed
    for settled in ("lookupMember", "listLoans", "cancelReservation"):
        assert "REVIEW" not in lines[settled], settled
    assert "REVIEW" in lines["title"] and "REVIEW" in lines["agent_role"]
    assert domain.title == "Riverside Library"
    # The skeleton's rules: one checked (confirm on the tools that change or remove records), the rest text.
    assert [r.id for r in domain.rules] == ["stay_in_scope", "confirm_changes", "no_invented_values", "report_failures"]
    assert domain.rules[1].kind == "confirm_before" and domain.rules[1].tools == ("cancelReservation", "renewLoan")
    policy = (library / "policy.md").read_text()
    assert "> **Be kind**: always." in policy  # the server's instructions, quoted: never read as a rule line
    # A declared create binds to its name's noun (a fine), not to the member whose id it takes.
    assert domain.entity_for(domain.tool("payFine")).name == "fine"
    from sim_pipeline.axes import validated_constraints

    assert {"tool": "payFine", "world_state": "entity_missing"} in validated_constraints(domain)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_gives_the_same_pack_as_stdio(server_script, library, tmp_path):
    port = _free_port()
    server = subprocess.Popen([sys.executable, str(server_script), "library", "http", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:  # up once it accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the HTTP server did not start"
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"
        assert main(["pack", "from-mcp", "--name", "riverside", "--out", str(tmp_path), "--url", url]) == 0
    finally:
        server.terminate()
        server.wait(timeout=30)
    pack = tmp_path / "riverside"
    files = sorted(str(p.relative_to(pack)) for p in pack.rglob("*") if p.is_file())
    assert files == sorted(str(p.relative_to(library)) for p in library.rglob("*") if p.is_file())
    for name in files:
        mine, theirs = (p.read_text().splitlines() for p in (pack / name, library / name))
        if name == "domain.yaml":  # its first line names the source: the URL here, the command there
            assert url in mine[0] and str(server_script) in theirs[0]
            mine, theirs = mine[1:], theirs[1:]
        assert mine == theirs, name


def test_names_the_pack_format_refuses_are_an_error_naming_each_or_documented_renames(server_script, tmp_path, capsys):
    args = ["pack", "from-mcp", "--name", "shop", "--out", str(tmp_path), *stdio(server_script, "clashing")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "'get.order' has characters outside" in err and "'message_user' is the project's own protocol tool" in err
    assert "'getInvoice' and 'get_invoice' are one tool name" in err or "'get_invoice' and 'getInvoice'" in err
    assert "--rename" in err and "get.order -> get_order" in err and "message_user -> message_user_tool" in err
    assert list(tmp_path.iterdir()) == []  # nothing written, no staging folder left
    assert main([*args[:-4], "--rename", *args[-4:]]) == 0
    domain = load_domain(tmp_path / "shop")
    assert sorted(t.name for t in domain.tools) == ["getInvoice", "get_invoice_2", "get_order", "message_user_tool"]
    text = (tmp_path / "shop" / "domain.yaml").read_text()
    for line in ("#   get.order -> get_order", "#   message_user -> message_user_tool", "#   get_invoice -> get_invoice_2"):
        assert line in text
    assert yaml.safe_load(text)["name"] == "shop"


def test_an_existing_pack_is_kept_unless_forced_and_a_pack_that_does_not_load_never_replaces_it(server_script, tmp_path,
                                                                                            capsys):
    base = ["pack", "from-mcp", "--name", "desk", "--out", str(tmp_path)]
    assert main([*base, *stdio(server_script)]) == 0
    before = {p: p.read_bytes() for p in (tmp_path / "desk").rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([*base, *stdio(server_script)]) == 2
    assert "exists. Fix: pass --force" in capsys.readouterr().err
    assert main([*base, "--force", *stdio(server_script, "lookahead")]) == 2
    err = capsys.readouterr().err
    assert "does not load, so nothing was written" in err and "findBook" in err and "lookaround" in err.lower()
    assert {p: p.read_bytes() for p in (tmp_path / "desk").rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["desk"]  # no staging folder left behind
    assert main([*base, "--force", *stdio(server_script)]) == 0  # the same server: the same bytes
    assert {p: p.read_bytes() for p in (tmp_path / "desk").rglob("*") if p.is_file()} == before


def test_a_server_that_cannot_be_reached_is_one_line(tmp_path, capsys):
    assert main(["pack", "from-mcp", "--name", "x", "--out", str(tmp_path), "--", sys.executable, "-c", "pass"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot list the tools of the MCP server") and "starts an MCP server on stdio" in err
    assert main(["pack", "from-mcp", "--name", "x", "--out", str(tmp_path), "--url",
                 f"http://127.0.0.1:{_free_port()}/mcp"]) == 2
    err = capsys.readouterr().err
    assert "streamable HTTP endpoint" in err and "Traceback" not in err
    assert main(["pack", "from-mcp", "--name", "Bad-Name", "--out", str(tmp_path), "--url", "http://x"]) == 2
    assert "cannot name a pack" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("hints, name, kind, guess", [
    ({}, "getBook", "read", True),  # no annotations: the name's guess, flagged
    ({"read_only": True}, "getBook", "read", False),
    ({"read_only": True}, "verifyCard", "verify", False),  # read-only: the name may refine it
    ({"read_only": True}, "deleteBook", "read", True),  # the name says otherwise: flagged
    ({"read_only": False, "destructive": False}, "addNote", "create", False),
    ({"read_only": False, "destructive": False, "idempotent": True}, "renewLoan", "update", True),
    ({"destructive": True}, "removeHold", "delete", False),
    ({"destructive": True}, "addHold", "update", True),  # additive by name, destructive by hint
    ({"read_only": False}, "frobnicate", "update", True),
])
def test_kinds_from_annotations(hints, name, kind, guess):
    tool = ServerTool(name, "A tool.", {"type": "object"}, None, hints.get("read_only"), hints.get("destructive"),
                      hints.get("idempotent"))
    found, _, flagged = kind_for(tool, name)
    assert (found, flagged) == (kind, guess)


def test_the_imported_pack_runs_to_a_summary_with_rollouts(library, tmp_path):
    packs = tmp_path / "packs"
    packs.mkdir()
    os.symlink(library, packs / "riverside")
    registry = tmp_path / "policies.yaml"
    # Opted out of the judge gate: at this size it is inconclusive, which is not under test here.
    registry.write_text(yaml.safe_dump({"policies": {"lib-v1": {"domain": "riverside", "model": "sim/agent-v1",
                                                                "judge_trust_opt_out": True}}}))
    script = ("import pathlib, sys; import sim_pipeline.domain as d; d.DOMAINS_DIR = pathlib.Path(sys.argv[1]); "
              "from sim_pipeline.cli import main; sys.exit(main(sys.argv[2:]))")
    ran = subprocess.run([sys.executable, "-c", script, str(packs), "run", "--domain", "riverside", "--situations",
                          "10", "--samples", "1", "--heldout-samples", "1", "--warehouse", str(tmp_path / "wh")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home"),
                              "SIM_PIPELINE_REGISTRY": str(registry), "PYTHONPATH": os.pathsep.join(sys.path)})
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    out = ran.stdout
    assert "sim_pipeline: domain 'riverside', seed 0" in out and "situations_solvable FAILED" not in out
    planned, solvable = (int(n) for n in re.search(r"situations\s+(\d+) planned, (\d+) solvable", out).groups())
    assert planned == solvable > 0
    assert "lib-v1        " in out and " rollouts, 0 errored" in out
    # `run` names the kinds left to the name's guess, as domain.yaml says it will.
    assert "tool kinds guessed from their names" in ran.stderr and "placeReservation create" in ran.stderr
