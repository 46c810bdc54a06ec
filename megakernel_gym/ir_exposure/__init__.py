"""The agent's view of the compiler: the IR text it reads, the edits it writes.

`render(ir)` / `parse(text, graph)` give and read back the op-level IR text; `render_op` gives
one op's tasks. `apply_edits(ir, text)` / `apply_json(ir, edits)` apply the edit language,
validated, all or nothing, with messages written for the agent.
"""
from megakernel_gym.ir_exposure.edits import (USAGE, VERBS, Edit, EditError, apply_edits, apply_json,
                                              compact_edits, edits_from_json, edits_to_json, format_edits,
                                              parse_edits, tuned_edits)
from megakernel_gym.ir_exposure.ir import (IR, LEGEND, IRError, IRParseError, count_tokens, make_ir, parse, render,
                                           render_op)

__all__ = ["IR", "IRError", "IRParseError", "make_ir", "render", "parse", "render_op", "count_tokens", "LEGEND",
           "Edit", "EditError", "parse_edits", "format_edits", "apply_edits", "apply_json", "edits_to_json",
           "edits_from_json", "VERBS", "USAGE", "tuned_edits", "compact_edits"]
