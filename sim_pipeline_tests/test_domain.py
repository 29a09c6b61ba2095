"""Domain packs: the shipped packs load and honour the contract; every loader error names the file, the field and the fix."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from sim_pipeline import defaults
from sim_pipeline.axes import validated_constraints
from sim_pipeline.domain import DOMAINS_DIR, load_domain
from sim_pipeline.errors import DomainPackError, SimPipelineError

SHIPPED = sorted(p.name for p in DOMAINS_DIR.iterdir() if (p / "domain.yaml").is_file())


# -- the shipped packs ------------------------------------------------------------------------------
def test_the_shipped_packs_are_present() -> None:
    assert {"retail", "it_helpdesk", "food_delivery"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_pack_loads_with_valid_constraints(name: str) -> None:
    domain = load_domain(name)
    assert domain.name == name
    assert domain.tools and domain.rules and domain.entities
    validated_constraints(domain)  # raises on an unknown axis or value


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_pack_writes_act_on_a_record(name: str) -> None:
    """A non-create write must take its entity's id, and an action may only require the entity's own fields."""
    domain = load_domain(name)
    for tool in domain.tools:
        if not tool.writes:
            continue
        entity = domain.entity_for(tool)
        assert entity is not None, f"{tool.name} acts on no entity"
        if tool.kind != "create":
            assert entity.id_argument in tool.parameters["properties"], tool.name
        action = domain.actions.get(tool.name)
        if action is not None:
            assert set(action.requires) <= {f.name for f in entity.fields}, tool.name


def test_it_helpdesk_mixes_tool_classes() -> None:
    kinds = {t.name: t.kind for t in load_domain("it_helpdesk").tools}
    assert kinds["reset_password"] == kinds["grant_access"] == kinds["revoke_access"] == "destructive"
    assert kinds["get_account"] == kinds["list_tickets"] == "read" and kinds["verify_identity"] == "verify"
    assert kinds["create_ticket"] == "create" and kinds["update_phone"] == "update"


# -- broken packs -----------------------------------------------------------------------------------
@pytest.fixture
def pack(tmp_path: Path) -> Path:
    """A copy of the retail pack to break one thing in."""
    return Path(shutil.copytree(DOMAINS_DIR / "retail", tmp_path / "retail"))


def _edit_yaml(path: Path, change: Callable[[dict], None]) -> None:
    spec = yaml.safe_load(path.read_text())
    change(spec)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


def _edit_tool(pack: Path, name: str, change: Callable[[dict], None]) -> None:
    path = pack / "tools" / f"{name}.json"
    schema = json.loads(path.read_text())
    change(schema)
    path.write_text(json.dumps(schema))


def _fails(pack: Path, file: str, *parts: str) -> None:
    """load_domain raises DomainPackError naming `file` (relative to the pack) and every part, in order."""
    pattern = "(?s)" + ".*".join(re.escape(p) for p in (str(pack / file), *parts))  # YAML errors span lines
    with pytest.raises(DomainPackError, match=pattern):
        load_domain(pack)


def test_copied_pack_loads(pack: Path) -> None:
    assert load_domain(pack).path == pack


def test_unknown_domain_name_lists_the_known_ones() -> None:
    with pytest.raises(DomainPackError, match=r"domain 'no_such_pack': no directory .*Fix: use one of \[.*'retail'"):
        load_domain("no_such_pack")


def test_domain_pack_error_is_a_sim_pipeline_error() -> None:
    assert issubclass(DomainPackError, SimPipelineError)


def test_missing_domain_yaml(pack: Path) -> None:
    (pack / "domain.yaml").unlink()
    _fails(pack, "domain.yaml", ": file: missing", "Fix: create domain.yaml")


def test_invalid_yaml(pack: Path) -> None:
    (pack / "domain.yaml").write_text("name: retail\nentities: [unclosed\n")
    _fails(pack, "domain.yaml", ": syntax: not valid YAML", "Fix: fix the YAML syntax")


def test_schema_violation_names_the_field(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s.update(name="Retail Store"))
    _fails(pack, "domain.yaml", "field 'name'", "does not match", "Fix: see sim_pipeline/domain.schema.json")


def test_schema_violation_missing_required_field(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s.pop("title"))
    _fails(pack, "domain.yaml", "field '(top level)'", "'title' is a required property", "Fix: see")


def test_schema_violation_unknown_field_kind(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["entities"]["order"]["fields"]["total"].update(kind="currency"))
    _fails(pack, "domain.yaml", "field 'entities/order/fields/total/kind'", "'currency'", "Fix:")


def test_missing_tools_dir(pack: Path) -> None:
    shutil.rmtree(pack / "tools")
    _fails(pack, "tools", ": directory: no tool schema (*.json) found", "Fix: add one OpenAI function schema per tool")


def test_invalid_tool_json(pack: Path) -> None:
    (pack / "tools" / "get_order.json").write_text('{"type": "function",\n "function": {')
    _fails(pack, "tools/get_order.json", ": line 2: not valid JSON", "Fix: fix the JSON syntax")


def test_tool_violating_the_tool_schema(pack: Path) -> None:
    _edit_tool(pack, "get_order", lambda s: s["function"].pop("description"))
    _fails(pack, "tools/get_order.json", "field 'function'", "'description' is a required property",
           "Fix: see sim_pipeline/tool.schema.json")


def test_tool_name_differs_from_file_name(pack: Path) -> None:
    _edit_tool(pack, "get_order", lambda s: s["function"].update(name="fetch_order"))
    _fails(pack, "tools/get_order.json", "field 'function/name': name 'fetch_order' differs from the file name",
           "Fix: rename the file to fetch_order.json or the tool to 'get_order'")


def test_parameters_not_a_json_schema(pack: Path) -> None:
    _edit_tool(pack, "get_order", lambda s: s["function"]["parameters"]["properties"]["order_id"].update(type="strng"))
    _fails(pack, "tools/get_order.json", "field 'function/parameters': not a valid JSON Schema",
           "Fix: write parameters as a JSON Schema object")


def test_required_argument_not_declared(pack: Path) -> None:
    _edit_tool(pack, "get_order", lambda s: s["function"]["parameters"]["required"].append("customer_id"))
    _fails(pack, "tools/get_order.json", "field 'function/parameters/required': ['customer_id'] not declared",
           "Fix: declare every required argument under properties")


def test_missing_policy(pack: Path) -> None:
    (pack / "policy.md").unlink()
    _fails(pack, "policy.md", ": file: missing", "Fix: write the policy as '- **rule_id**: text' lines")


def test_policy_without_rule_lines(pack: Path) -> None:
    (pack / "policy.md").write_text("# Policy\n\nBe nice to customers.\n- verify_identity: no bold id here\n")
    _fails(pack, "policy.md", ": rules: no rule found", "Fix: write each rule as a line '- **rule_id**: text'")


def test_duplicate_rule_ids(pack: Path) -> None:
    with (pack / "policy.md").open("a") as f:
        f.write("- **refund_limit**: said twice.\n")
    _fails(pack, "policy.md", "duplicate rule ids ['refund_limit']", "Fix: give every rule its own id")


def test_too_many_rules(pack: Path) -> None:
    with (pack / "policy.md").open("a") as f:
        f.writelines(f"- **extra_{i}**: one more clause.\n" for i in range(defaults.MAX_RULES))
    _fails(pack, "policy.md", f"more than {defaults.MAX_RULES}", "Fix: merge rules or split the domain")


def test_rule_continues_on_indented_lines(pack: Path) -> None:
    rule = next(r for r in load_domain(pack).rules if r.id == "verify_identity")
    assert rule.text.endswith("the email address they give you.") and "\n" not in rule.text


def test_rule_structure_naming_an_unknown_tool(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"]["confirm_destructive"]["tools"].append("delete_order"))
    _fails(pack, "domain.yaml", "field 'rules/confirm_destructive': unknown tools ['delete_order']",
           "Fix: use tools from [")


def test_rule_structure_naming_an_unknown_verify_tool(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"]["verify_identity"].update(verify_tool="check_id"))
    _fails(pack, "domain.yaml", "field 'rules/verify_identity': unknown tools ['check_id']")


def test_rule_structure_for_an_unknown_rule_id(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"].update(ghost_rule={"kind": "confirm_before",
                                                                               "tools": ["cancel_order"]}))
    _fails(pack, "domain.yaml", "field 'rules/ghost_rule': no rule with this id in policy.md", "Fix: use one of [")


def test_argument_limit_without_max(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"]["refund_limit"].pop("max"))
    _fails(pack, "domain.yaml", "field 'rules/refund_limit': kind argument_limit needs ['max']", "Fix: add ['max']")


def test_verify_before_without_verify_tool(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"]["verify_identity"].pop("verify_tool"))
    _fails(pack, "domain.yaml", "kind verify_before needs ['verify_tool']", "Fix: add ['verify_tool']")


def test_action_for_an_unknown_tool(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["actions"].update(ship_order={"sets": {"status": "shipped"}}))
    _fails(pack, "domain.yaml", "field 'actions/ship_order': no such tool in tools/", "Fix: use one of [")


def test_enum_field_without_values(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["entities"]["order"]["fields"]["status"].pop("values"))
    _fails(pack, "domain.yaml", "field 'entities/order/fields/status': kind enum without values",
           "Fix: list the values under 'values'")


def test_lookup_by_not_a_field(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["entities"]["order"].update(lookup_by="phone"))
    _fails(pack, "domain.yaml", "field 'entities/order/lookup_by': 'phone' is not a field",
           "Fix: name one of the entity's fields")


# -- what the loader used to accept silently ----------------------------------------------------------
def test_name_differs_from_the_folder(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s.update(name="shop"))
    _fails(pack, "domain.yaml", "field 'name': 'shop' differs from the pack's folder 'retail'", "Fix: set name: retail")


def test_id_argument_no_tool_takes(pack: Path) -> None:
    def change(spec: dict) -> None:
        spec["entities"]["order"]["id_argument"] = "orderRef"
        spec["entities"]["order"].pop("lookup_by")
    _edit_yaml(pack / "domain.yaml", change)
    _fails(pack, "domain.yaml", "field 'entities/order/id_argument': no tool takes 'orderRef'", "Fix: use an argument")


def test_action_requiring_a_field_the_entity_lacks(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["actions"]["cancel_order"]["requires"].update(state=["open"]))
    _fails(pack, "domain.yaml", "field 'actions/cancel_order/requires': ['state'] is not a field of order",
           "could never run", "Fix: require fields of the entity")


def test_action_setting_from_an_argument_the_tool_lacks(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["actions"]["update_address"]["sets"].update(address="$new_address"))
    _fails(pack, "domain.yaml", "field 'actions/update_address/sets/address': '$new_address' names no argument",
           "Fix: use $ and one of ['address', 'order_id']")


def test_limit_on_an_argument_the_tool_lacks(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"]["refund_limit"].update(argument="total"))
    _fails(pack, "domain.yaml", "field 'rules/refund_limit/argument': refund_order has no argument 'total'",
           "Fix: name one of ['amount', 'order_id']")


def test_verify_before_naming_a_tool_that_cannot_verify(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"]["verify_identity"].update(verify_tool="get_order"))
    _fails(pack, "domain.yaml", "field 'rules/verify_identity/verify_tool': 'get_order' is not a verify tool",
           "Fix: name the tool that verifies the customer, one of ['verify_customer']")


@pytest.mark.parametrize(("rule_id", "suggested"), [("Refund_Limit", "refund_limit"), ("no invented ids", "no_invented_ids"),
                                                    ("2fa-first", "rule_2fa_first")])
def test_rule_ids_that_are_not_snake_case_are_refused_not_dropped(pack: Path, rule_id: str, suggested: str) -> None:
    policy = pack / "policy.md"
    policy.write_text(policy.read_text() + f"- **{rule_id}**: A rule an author wrote with another id style.\n")
    _fails(pack, "policy.md", f"rule id '{rule_id}' is not lower_snake_case", f"Fix: write it as '**{suggested}**'")


# -- declared tool kinds -----------------------------------------------------------------------------
def _rename_tool(pack: Path, old: str, new: str) -> None:
    schema = json.loads((pack / "tools" / f"{old}.json").read_text())
    schema["function"]["name"] = new
    (pack / "tools" / f"{old}.json").unlink()
    (pack / "tools" / f"{new}.json").write_text(json.dumps(schema))
    text = (pack / "domain.yaml").read_text().replace(old, new)
    (pack / "domain.yaml").write_text(text)


def test_declared_kinds_entities_and_phrases_override_the_name(pack: Path) -> None:
    _rename_tool(pack, "verify_customer", "confirm_identity")  # no verify verb: the rule needs the declaration
    _rename_tool(pack, "cancel_order", "voidOrder")
    _edit_yaml(pack / "domain.yaml", lambda s: s.update(tools={
        "confirm_identity": {"kind": "verify"},
        "voidOrder": {"kind": "update", "entity": "order", "phrase": "void my order"}}))
    domain = load_domain(pack)
    assert domain.tool("confirm_identity").kind == "verify"
    void = domain.tool("voidOrder")
    assert (void.kind, void.writes, void.entity, void.phrase) == ("update", True, "order", "void my order")
    assert domain.entity_for(void).name == "order"
    assert domain.tool("get_order").kind == "read" and domain.tool("get_order").phrase is None  # undeclared: guessed


def test_undeclared_verify_tool_without_a_verify_verb_is_refused(pack: Path) -> None:
    _rename_tool(pack, "verify_customer", "confirm_identity")
    _fails(pack, "domain.yaml", "'confirm_identity' is not a verify tool", "declare it under tools: "
           "(confirm_identity: {kind: verify})")


def test_declaration_for_an_unknown_tool(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s.update(tools={"ship_order": {"kind": "update"}}))
    _fails(pack, "domain.yaml", "field 'tools/ship_order': no such tool in tools/", "Fix: use one of [")


def test_declaration_with_an_unknown_kind(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s.update(tools={"get_order": {"kind": "fetch"}}))
    _fails(pack, "domain.yaml", "field 'tools/get_order/kind'", "is not one of")


def test_declaration_naming_an_unknown_entity(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s.update(tools={"get_order": {"entity": "parcel"}}))
    _fails(pack, "domain.yaml", "field 'tools/get_order/entity': no entity 'parcel'", "Fix: use one of ['order']")


def test_declared_write_that_cannot_name_its_record(pack: Path) -> None:
    _edit_tool(pack, "update_address", lambda s: (s["function"]["parameters"]["properties"].pop("order_id"),
                                                  s["function"]["parameters"]["required"].remove("order_id")))
    _edit_yaml(pack / "domain.yaml", lambda s: (s.update(tools={"update_address": {"entity": "order"}}),
                                                s["rules"]["verify_identity"]["tools"].remove("update_address")))
    _fails(pack, "domain.yaml", "field 'tools/update_address/entity'", "takes neither 'order_id' nor its lookup field")


# -- structured fields, links and id shapes ----------------------------------------------------------------------
def test_link_to_an_unknown_entity(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["entities"]["order"]["fields"].update(
        customer_id={"kind": "link", "entity": "customer"}))
    _fails(pack, "domain.yaml", "field 'entities/order/fields/customer_id/entity': no entity 'customer'",
           "Fix: link to one of ['order']")


def test_link_without_an_entity(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["entities"]["order"]["fields"].update(customer_id={"kind": "link"}))
    _fails(pack, "domain.yaml", "field 'entities/order/fields/customer_id': kind link without entity")


def test_list_field_without_a_schema(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["entities"]["order"]["fields"].update(lines={"kind": "list"}))
    _fails(pack, "domain.yaml", "field 'entities/order/fields/lines': kind list without a schema, and no tool "
           "argument 'lines'", "Fix: give its JSON Schema under 'schema' (type: array)")


def test_object_field_whose_schema_is_not_an_object(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["entities"]["order"]["fields"].update(
        box={"kind": "object", "schema": {"type": "array"}}))
    _fails(pack, "domain.yaml", "field 'entities/order/fields/box': kind object but its schema's type is 'array'")


def test_list_field_takes_the_tool_arguments_schema(pack: Path) -> None:
    lines = {"type": "array", "items": {"type": "object", "required": ["sku"], "properties": {"sku": {
        "type": "string", "pattern": "^SKU[0-9]{3}$"}}}, "minItems": 1}
    _edit_tool(pack, "return_item", lambda s: s["function"]["parameters"]["properties"].update(lines=lines))
    _edit_yaml(pack / "domain.yaml", lambda s: s["entities"]["order"]["fields"].update(lines={"kind": "list"}))
    field = next(f for f in load_domain(pack).entities[0].fields if f.name == "lines")
    assert (field.kind, json.loads(field.values[0])) == ("schema", lines)


def test_two_entities_with_one_id_shape(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: (
        s["entities"]["order"].update(id_pattern="^[0-9]{5}$"),
        s["entities"].update(parcel={"id_argument": "order_id", "id_pattern": "^[0-9]{5}$",
                                     "fields": {"weight": {"kind": "integer"}}})))
    _fails(pack, "domain.yaml", "field 'entities/parcel/id_pattern': the same id pattern as entity 'order'",
           "Fix: give each entity its own id shape")


def test_id_pattern_that_is_not_a_regex(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["entities"]["order"].update(id_pattern="^[0-9{5}$"))
    _fails(pack, "domain.yaml", "field 'entities/order/id_pattern': not a regular expression")


def test_pool_value_the_schema_refuses(pack: Path) -> None:
    _edit_tool(pack, "update_address", lambda s: s["function"]["parameters"]["properties"]["address"].update(
        maxLength=12))
    _fails(pack, "domain.yaml", "field 'facts/address': value '12 Harbor Lane Portland OR 97201' does not fit "
           "argument 'address' of update_address", "Fix: write pool values the tool's schema accepts")


# -- rule kinds ---------------------------------------------------------------------------------------------------
def test_eligibility_rule_for_a_tool_without_requires(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"].update(
        cancel_before_ship={"kind": "eligibility", "tools": ["cancel_order", "track_shipment"]}))
    _fails(pack, "domain.yaml", "field 'rules/cancel_before_ship/tools': ['track_shipment'] declare no `requires`",
           "Fix: give each tool an action with requires")


def test_transfer_when_naming_a_tool_that_does_not_hand_over(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"].update(
        refund_after_delivery={"kind": "transfer_when", "transfer_tool": "get_order", "tools": ["refund_order"]}))
    _fails(pack, "domain.yaml", "field 'rules/refund_after_delivery/transfer_tool': 'get_order' is not a hand-off tool")


def test_allowed_values_on_a_missing_argument(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"].update(
        refund_after_delivery={"kind": "allowed_values", "tool": "refund_order", "argument": "method",
                               "values": ["card"]}))
    _fails(pack, "domain.yaml", "field 'rules/refund_after_delivery/argument': refund_order has no argument 'method'")


def test_max_calls_needs_a_max(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"].update(
        refund_after_delivery={"kind": "max_calls", "tool": "refund_order"}))
    _fails(pack, "domain.yaml", "kind max_calls needs ['max']", "Fix: add ['max']")


def test_eligibility_is_only_planned_where_a_record_can_be_ineligible(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"].update(
        cancel_before_ship={"kind": "eligibility", "tools": ["cancel_order", "update_address"]}))
    implied = [c for c in validated_constraints(load_domain(pack)) if c.get("rule") == "cancel_before_ship"]
    assert sorted(c["world_state"] for c in implied) == ["already_acted_on", "entity_missing", "partially_completed",
                                                         "unknown"]


# -- policy.md lines that used to be dropped (issue 17, item 3) --------------------------------------------
@pytest.mark.parametrize(("line", "problem", "fix"), [
    ("- **Refund_Window**: Refunds within 30 days.", "rule id 'Refund_Window' is not lower_snake_case (rule ids "
     "have no capital letters)", "Fix: write it as '**refund_window**'"),
    ("- **refund_window:** Refunds within 30 days.", "rule 'refund_window': the ':' is inside the bold",
     "Fix: write the line as '- **refund_window**: Refunds within 30 days.'"),
    ("1. **refund_window**: Refunds within 30 days.", "rule 'refund_window' is not a '- ' list item",
     "Fix: write the line as '- **refund_window**: Refunds within 30 days.'"),
    ("+ **refund_window**: x", "rule 'refund_window' is not a '- ' list item", "'- **refund_window**: x'"),
    ("- **refund_window** - Refunds within 30 days.", "rule 'refund_window' has no ':' after its id",
     "'- **refund_window**: Refunds within 30 days.'"),
    ("- **refund_window**:", "rule 'refund_window' has no text", "'- **refund_window**: <what the rule says>'"),
    ("**Refund_Window**: x", "rule id 'Refund_Window' is not lower_snake_case", "'**refund_window**'"),
    ("- __refund_window__: x", "rule 'refund_window': the id is set in __ __ rather than ** **",
     "'- **refund_window**: x'"),
])
def test_a_line_that_looks_like_a_rule_is_refused_with_its_line(pack: Path, line: str, problem: str, fix: str) -> None:
    policy = pack / "policy.md"
    number = len(policy.read_text().splitlines()) + 1
    policy.write_text(policy.read_text() + line + "\n")
    _fails(pack, "policy.md", f": line {number}: {problem}", fix)


def test_prose_with_bold_words_inside_is_not_a_rule(pack: Path) -> None:
    policy = pack / "policy.md"
    policy.write_text(policy.read_text() + "\nThe agent must **never** guess; **Always** be polite.\n")
    assert len(load_domain(pack).rules) == 7


def test_a_rule_referenced_in_another_case_says_so(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"].update(Refund_Limit=s["rules"].pop("refund_limit")))
    _fails(pack, "domain.yaml", "field 'rules/Refund_Limit': no rule with this id in policy.md, which has "
           "'refund_limit': the two differ only in case", "Fix: write 'refund_limit'")


def test_a_tool_referenced_in_another_case_says_so(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["actions"].update(Cancel_Order=s["actions"].pop("cancel_order")))
    _fails(pack, "domain.yaml", "field 'actions/Cancel_Order': no such tool in tools/, which has 'cancel_order'",
           "Fix: write 'cancel_order'")
    _edit_yaml(pack / "domain.yaml", lambda s: s["actions"].update(cancel_order=s["actions"].pop("Cancel_Order")))
    _edit_yaml(pack / "domain.yaml", lambda s: s["rules"]["confirm_destructive"].update(tools=["Refund_Order"]))
    _fails(pack, "domain.yaml", "field 'rules/confirm_destructive': no tool 'Refund_Order' in tools/, which has "
           "'refund_order'")


# -- files a parser would read silently wrong (issue 17, items 1 and 4) ---------------------------------
def test_a_key_written_twice_in_domain_yaml_names_both_lines(pack: Path) -> None:
    spec = pack / "domain.yaml"
    lines = spec.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  refund_limit:"))
    spec.write_text("\n".join([*lines[:at + 1], "  refund_limit: {kind: argument_limit, tool: refund_order, "
                                                 "argument: amount, max: 5000}", *lines[at + 1:]]) + "\n")
    _fails(pack, "domain.yaml", f": line {at + 2}: key 'rules/refund_limit' appears twice (first at line {at + 1})",
           "Fix: keep one of them")


def test_a_key_written_twice_in_a_tool_schema_is_refused(pack: Path) -> None:
    path = pack / "tools" / "get_order.json"
    path.write_text(path.read_text().replace('"type": "function",', '"type": "function", "type": "function",', 1))
    _fails(pack, "tools/get_order.json", ": content: not valid JSON (key(s) ['type'] appear twice in one object",
           "Fix: fix the JSON")


@pytest.mark.parametrize("file", ["policy.md", "domain.yaml", "tools/get_order.json"])
def test_bytes_that_are_not_utf8_name_the_file_and_line(pack: Path, file: str) -> None:
    path = pack / file
    path.write_bytes(path.read_bytes() + b"\n\xff\xfe trailing")
    number = path.read_bytes().count(b"\n") + 1
    _fails(pack, file, f": line {number}: byte 0xff is not UTF-8 text", "Fix: save the file as UTF-8")


def test_nesting_past_the_bound_is_refused(pack: Path) -> None:
    deep = "[" * (defaults.DEFINITION_MAX_DEPTH + 5) + "]" * (defaults.DEFINITION_MAX_DEPTH + 5)
    (pack / "domain.yaml").write_text((pack / "domain.yaml").read_text() + f"stances: {deep}\n")
    _fails(pack, "domain.yaml", f"nested more than {defaults.DEFINITION_MAX_DEPTH} levels deep",
           "Fix: flatten the structure")
    path = pack / "tools" / "get_order.json"
    path.write_text(path.read_text().rstrip()[:-1] + ', "x": ' + deep + "}")
    (pack / "domain.yaml").write_text((pack / "domain.yaml").read_text().replace(f"stances: {deep}\n", ""))
    _fails(pack, "tools/get_order.json", f"nested more than {defaults.DEFINITION_MAX_DEPTH} levels deep")


def test_an_alias_that_holds_itself_and_binary_tags_are_refused(pack: Path) -> None:
    spec = pack / "domain.yaml"
    original = spec.read_text()
    spec.write_text(original + "stances: &loop [ordinary, *loop]\n")
    _fails(pack, "domain.yaml", "'stances/1' is an alias of 'stances', which contains it", "Fix: write the value out")
    spec.write_text(original + "stances: !!binary aGVsbG8=\n")
    _fails(pack, "domain.yaml", "the tag tag:yaml.org,2002:binary makes a value that is not plain data")


def test_an_unquoted_date_stays_the_text_it_was_written_as(pack: Path) -> None:
    spec = pack / "domain.yaml"
    spec.write_text(spec.read_text() + "stances: [ordinary, 2024-05-01]\n")
    assert load_domain(pack).stances == ("ordinary", "2024-05-01")


@pytest.mark.parametrize(("parameters", "problem"), [
    ({"type": "object", "properties": {"order_id": {"$ref": "#/$defs/missing"}}},
     "$ref '#/$defs/missing' names nothing in this schema"),
    ({"type": "object", "properties": {"order_id": {"$ref": "https://example.com/id.json"}}},
     "names nothing in this schema (references to other files are never fetched)"),
    ({"type": "object", "properties": {"order_id": {"$ref": "#/$defs/a"}},
      "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}},
     "its references loop back to a schema they started from"),
    ({"type": "object", "properties": {"order_id": {"type": "string", "pattern": "^[0-9]{99999999999}$"}}},
     "not a usable JSON Schema (OverflowError"),
    ({"type": "object", "$id": "https://example.com/x", "properties": {"order_id": {"type": "string"}}},
     "'$id' re-bases the references of a tool schema"),
])
def test_tool_schemas_the_sandbox_could_not_validate_with_are_refused(pack: Path, parameters: dict,
                                                                      problem: str) -> None:
    _edit_tool(pack, "get_order", lambda s: s["function"].update(parameters=parameters))
    _fails(pack, "tools/get_order.json", "field 'function/parameters'", problem, "Fix:")


# Tool patterns are matched with RE2 (linear time): one it cannot run is refused, naming the file, the field, the pattern.
@pytest.mark.parametrize(("where", "change", "pattern", "reason"), [
    ("properties/order_id/pattern", lambda p: p["properties"]["order_id"].update(pattern=r"^([0-9])\1+$"),
     r'"^([0-9])\\1+$"', r"invalid escape sequence: \1"),
    ("properties/notes/items/pattern", lambda p: p["properties"].update(notes={
        "type": "array", "items": {"type": "string", "pattern": r"^(?=.*\d).+$"}}),
     r'"^(?=.*\\d).+$"', "invalid perl operator: (?="),
    ("$defs/tag/patternProperties/(?<!x)y", lambda p: p.update({"$defs": {"tag": {
        "type": "object", "patternProperties": {"(?<!x)y": {"type": "string"}}}}}),
     '"(?<!x)y"', "invalid perl operator: (?<!"),
])
def test_a_pattern_that_needs_backtracking_is_refused_naming_file_and_field(
        pack: Path, where: str, change: Callable[[dict], None], pattern: str, reason: str) -> None:
    _edit_tool(pack, "get_order", lambda s: change(s["function"]["parameters"]))
    _fails(pack, "tools/get_order.json", f": field 'function/parameters/{where}': pattern {pattern} cannot be matched in "
           f"linear time (RE2 refuses it: {reason}). Fix: rewrite it without backreferences (\\1, \\k<name>) or "
           "lookaround ((?=, (?!, (?<=, (?<!)")


def test_unevaluated_properties_beside_pattern_properties_is_refused(pack: Path) -> None:
    """jsonschema would match the property names of unevaluatedProperties against patternProperties with `re`."""
    _edit_tool(pack, "get_order", lambda s: s["function"]["parameters"].update(
        patternProperties={"^x_": {"type": "string"}}, unevaluatedProperties=False, additionalProperties=True))
    _fails(pack, "tools/get_order.json", "field 'function/parameters/unevaluatedProperties'",
           "Python's backtracking regex engine", "Fix: use additionalProperties beside the patternProperties")


def test_an_entity_schema_or_id_pattern_that_needs_backtracking_is_refused(pack: Path) -> None:
    _edit_yaml(pack / "domain.yaml", lambda s: s["entities"]["order"].update(id_pattern=r"^(?!0)[0-9]{5}$"))
    _fails(pack, "domain.yaml", "field 'entities/order/id_pattern': pattern \"^(?!0)[0-9]{5}$\" cannot be matched in "
           "linear time", "Fix: rewrite it without backreferences")
    _edit_yaml(pack / "domain.yaml", lambda s: (s["entities"]["order"].pop("id_pattern"), s["entities"]["order"][
        "fields"].update(tags={"kind": "list", "schema": {"type": "array", "items": {"pattern": r"(\w)\1"}}})))
    _fails(pack, "domain.yaml", "field 'entities/order/fields/tags/schema/items/pattern': pattern", "Fix: rewrite")


def test_pattern_properties_and_their_additional_properties_match_with_re2(pack: Path) -> None:
    _edit_tool(pack, "get_order", lambda s: s["function"]["parameters"].update(
        patternProperties={"^note_(a|a)*$": {"type": "string"}}))
    domain = load_domain(pack)
    from sim_pipeline.world.sandbox import Sandbox, WorldSetup

    sandbox = Sandbox(domain, seed=0, setup=WorldSetup())
    order = min(sandbox.state["order"])
    assert sandbox.call("get_order", {"order_id": order, "note_aa": "gift"})["status"] == "ok"
    refused = sandbox.call("get_order", {"order_id": order, "note_" + "a" * 40 + "!": "gift"})  # RE2: at once
    assert refused["error"] == "invalid_argument" and refused["fields"] == ["note_" + "a" * 40 + "!"]


def test_local_references_that_resolve_load(pack: Path) -> None:
    _edit_tool(pack, "get_order", lambda s: s["function"].update(parameters={
        "type": "object", "properties": {"order_id": {"$ref": "#/$defs/order_id"}, "note": {"$ref": "#tag"}},
        "required": ["order_id"], "$defs": {"order_id": {"type": "string", "pattern": "^[0-9]{4,6}$"},
                                            "tag": {"$anchor": "tag", "type": "string"}}}))
    assert load_domain(pack).tool("get_order").required == ("order_id",)


# -- tool names (issue 29, item 5) ------------------------------------------------------------------------
def _add_tool(pack: Path, name: str, like: str = "get_order") -> None:
    """A copy of tool `like` under another name (file and function/name), beside the original."""
    schema = json.loads((pack / "tools" / f"{like}.json").read_text())
    schema["function"]["name"] = name
    (pack / "tools" / f"{name}.json").write_text(json.dumps(schema))


@pytest.mark.parametrize(("name", "reserved"), [("message_user", "message_user"), ("user_action", "user_action"),
                                                ("Message-User", "message_user"), ("userAction", "user_action")])
def test_a_tool_named_as_the_protocols_own_is_refused(pack: Path, name: str, reserved: str) -> None:
    _add_tool(pack, name)
    _fails(pack, f"tools/{name}.json", f"field 'function/name': '{name}' is a reserved tool name",
           "the project's own protocol uses ['message_user', 'user_action']",
           "Fix: rename the tool (its file and function/name) to a name outside ['message_user', 'user_action']")
    if name != reserved:
        _fails(pack, f"tools/{name}.json", f"('{reserved}' once case, '-'/'_' and camelCase are set aside)")


@pytest.mark.parametrize("name", ["Get_Order", "get-order", "getOrder", "GET_ORDER"])
def test_two_tools_that_are_one_name_once_case_and_separators_are_set_aside_are_refused(pack: Path,
                                                                                         name: str) -> None:
    _add_tool(pack, name)
    first, second = sorted([f"{name}.json", "get_order.json"])  # files load in sorted order; the second is refused
    _fails(pack, f"tools/{second}", f"(in {pack / 'tools' / first}) are one tool name once case, '-'/'_' and "
           "camelCase are set aside", "Fix: rename one of the two tools (its file and function/name)")


def test_tools_whose_names_only_share_letters_in_another_order_load(pack: Path) -> None:
    _add_tool(pack, "get_orders")  # a plural is another name, not a spelling of get_order
    assert {"get_order", "get_orders"} <= {t.name for t in load_domain(pack).tools}
