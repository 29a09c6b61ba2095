"""A domains folder for isolation tests: copies of the shipped packs plus `badpack`, whose tool file is not JSON."""

import shutil
from pathlib import Path

from sim_pipeline.domain import DOMAINS_DIR

BAD_TOOL = '{"type": "function",\n "function": {'  # cut off mid-object: line 2 is where the JSON breaks
BAD_PACK_ERROR = "badpack/tools/get_order.json: line 2: not valid JSON"


def domains_with_a_broken_pack(root: Path) -> Path:
    """Copy every shipped pack under `root`, add `badpack` (retail's files, renamed, one tool file broken); return
    `root` (point sim_pipeline.domain.DOMAINS_DIR at it; data/domains is never written)."""
    shutil.copytree(DOMAINS_DIR, root)
    bad = Path(shutil.copytree(root / "retail", root / "badpack"))
    spec = bad / "domain.yaml"
    spec.write_text(spec.read_text().replace("\nname: retail\n", "\nname: badpack\n"))
    (bad / "tools" / "get_order.json").write_text(BAD_TOOL)
    return root
