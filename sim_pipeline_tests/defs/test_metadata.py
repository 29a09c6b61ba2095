"""Metadata tables read well in the UI: a confusion matrix keeps its row labels."""

import pandas as pd

from sim_pipeline.defs.metadata import table_metadata


def test_a_confusion_matrix_keeps_its_row_labels():
    confusion = pd.DataFrame([[30, 2], [1, 40]], index=pd.Index(["judge pass", "judge fail"], name="judge"),
                             columns=pd.Index(["gold pass", "gold fail"], name="gold"))
    table = table_metadata(confusion)
    assert [c.name for c in table.schema.columns] == ["judge", "gold pass", "gold fail"]
    assert [r.data["judge"] for r in table.records] == ["judge pass", "judge fail"]


def test_a_plain_table_is_unchanged():
    table = table_metadata(pd.DataFrame({"metric": ["pass@1"], "value": [0.5]}))
    assert [c.name for c in table.schema.columns] == ["metric", "value"]


def test_a_filtered_table_does_not_show_its_leftover_row_numbers():
    slices = pd.DataFrame({"axis": ["tool", "stance", "tool"], "verdict": ["PASS", "INSUFFICIENT DATA", "FAIL"]})
    table = table_metadata(slices[slices["verdict"] != "INSUFFICIENT DATA"])
    assert [c.name for c in table.schema.columns] == ["axis", "verdict"]
    assert [r.data["verdict"] for r in table.records] == ["PASS", "FAIL"]
