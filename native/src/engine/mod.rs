//! The ordering engine in plain Rust (no PyO3): one task's state, receipt, decisions,
//! delivery and changelog rows, with the rules of `parsley.engine.engine.ProcessEngine`
//! (docs/model.md); a refusal leaves it as a `Refusal`, whose detail the host writes. The PyO3 class that drives it,
//! with the same API as `ProcessEngine`, is `crate::py_engine`; what the core needs from
//! its host (payloads, the store, warnings, channel rendering) is the trait in `host.rs`.
//!
//! - `state.rs`: the state, restore, `start`, pruning, queries, changelog rows
//! - `receipt.rs`: receiving a message
//! - `delivery.rs`: deciding and delivering heads, the `parsley.causes` header
//! - `frontier.rs`, `ordered.rs`, `fx.rs`: the frontier's encoding, ordered maps, hasher

mod state;
mod delivery;
pub mod frontier;
pub mod fx;
mod host;
pub mod ordered;
mod receipt;
#[cfg(test)]
mod tests;

pub use self::state::{Causes, Config, Core, Delivered, Held, Restore, RowSink};
pub use self::host::{Fault, HeldParts, Host, Reason, Refusal};
pub use self::receipt::{
    encodable_position, header_role, CausesHeader, HeaderRole, CAUSES_HEADER, RESERVED_PREFIX,
};
