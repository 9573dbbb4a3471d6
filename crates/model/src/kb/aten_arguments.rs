//! Arguments an ATen operator gained without a default whose value a legacy call site implies:
//! what the operator computed before the argument existed. A port passes the value where the
//! target's schema asks for the argument and the call does not give it.

use super::KnowledgeBase;
use serde::Deserialize;

/// `leaky_relu_backward`'s `self_is_result`: `false` (legacy calls pass the forward's input).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtenDerivedArgumentRow {
    /// The operator (`leaky_relu_backward`); its `_out` form shares the row.
    pub op: String,
    /// The argument's name in the schema.
    pub argument: String,
    /// The C++ expression passed; `{NAME}` stands for the call's own argument NAME.
    pub value: String,
    /// Why the value reproduces what the legacy call computed.
    pub why: String,
    pub source: String,
}

impl KnowledgeBase {
    /// The row for `op`'s (or `op_out`'s) argument `argument`.
    pub fn derived_argument(&self, op: &str, argument: &str) -> Option<&AtenDerivedArgumentRow> {
        let op = op.strip_suffix("_out").unwrap_or(op);
        self.aten_derived_arguments
            .iter()
            .find(|r| r.op == op && r.argument == argument)
    }
}
