//! What the engine core asks of its host, and how it fails.
//!
//! The core knows channels, positions and bytes; the host (the PyO3 adapter
//! `crate::py_engine`, or a test's) owns the message payloads (key, value, headers), the
//! ordering store, the warning callback and the rendering of channels in warnings. A
//! refusal leaves the core as its figures (`Refusal`), and the host writes its detail.

use crate::state_codec::HeldRef;
use crate::wire::Channel;

/// Why the engine refused: a `parsley.refusals.Reason` member (docs/runbooks.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    UndecodableMetadata,
    MetadataBudgetExceeded,
    OutOfOrderFeed,
    CoveredPositionFed,
    CrossPartitionCause,
    UnknownOrderingStateFormat,
}

impl Reason {
    /// The member's name in `parsley.refusals.Reason`.
    pub fn name(self) -> &'static str {
        match self {
            Reason::UndecodableMetadata => "UNDECODABLE_METADATA",
            Reason::MetadataBudgetExceeded => "METADATA_BUDGET_EXCEEDED",
            Reason::OutOfOrderFeed => "OUT_OF_ORDER_FEED",
            Reason::CoveredPositionFed => "COVERED_POSITION_FED",
            Reason::CrossPartitionCause => "CROSS_PARTITION_CAUSE",
            Reason::UnknownOrderingStateFormat => "UNKNOWN_ORDERING_STATE_FORMAT",
        }
    }
}

/// A refusal with its figures: the host writes its detail. The texts live in one place,
/// `parsley/engine/details.py`, whose function of the same name (in snake case) the
/// Python adapter calls with these fields, so both engines' details are one text
/// (docs/failing-closed.md, "Detail shapes"). Positions are offsets; sizes, bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A `parsley.causes` header that is not the wire format (`diagnosis` says how).
    Undecodable {
        ch: Channel,
        position: i64,
        diagnosis: String,
    },
    /// A header longer than the metadata budget, on receipt.
    HeaderOverBudget {
        ch: Channel,
        position: i64,
        size: usize,
        budget: usize,
    },
    /// The frontier grew past the budget on a merge.
    FrontierOverBudget {
        size: usize,
        channels: usize,
        budget: usize,
    },
    /// The header a send needs is longer than the budget.
    EmissionOverBudget {
        size: usize,
        channels: usize,
        budget: usize,
    },
    /// A feed at or below the position this execution last fed the channel.
    FedAfterPosition {
        ch: Channel,
        position: i64,
        fed_before: i64,
    },
    /// A feed on a channel recorded as fed to its end (its topic deleted).
    FedGoneChannel { ch: Channel, position: i64 },
    /// A feed inside this execution's own coverage, above the session floor.
    CoveredPositionFed {
        ch: Channel,
        position: i64,
        fed_up_to: i64,
        floor: Option<i64>,
    },
    /// A cause on a partition another task reads, under the refusing policy.
    CrossPartitionCause {
        ch: Channel,
        position: i64,
        key: String,
        cause: Channel,
        cause_at: i64,
    },
    /// A held message whose row has gone from the store.
    HeldBodyMissing { ch: Channel, position: i64 },
    /// A held message's row that does not decode (the codec's diagnosis, whole).
    CorruptHeld { diagnosis: String },
}

impl Refusal {
    /// The reason this refusal is raised with.
    pub fn reason(&self) -> Reason {
        match self {
            Refusal::Undecodable { .. } => Reason::UndecodableMetadata,
            Refusal::HeaderOverBudget { .. }
            | Refusal::FrontierOverBudget { .. }
            | Refusal::EmissionOverBudget { .. } => Reason::MetadataBudgetExceeded,
            Refusal::FedAfterPosition { .. } | Refusal::FedGoneChannel { .. } => {
                Reason::OutOfOrderFeed
            }
            Refusal::CoveredPositionFed { .. } => Reason::CoveredPositionFed,
            Refusal::CrossPartitionCause { .. } => Reason::CrossPartitionCause,
            Refusal::HeldBodyMissing { .. } | Refusal::CorruptHeld { .. } => {
                Reason::UnknownOrderingStateFormat
            }
        }
    }
}

/// A failed engine call: a fail-closed refusal, a call out of sequence (Python's
/// `RuntimeError`), or an error the host raised while the core called it.
#[derive(Debug, PartialEq, Eq)]
pub enum Fault<E> {
    Refused(Refusal),
    Misuse(&'static str),
    Host(E),
}

/// A held message's application parts as bytes, lent for encoding its blob.
pub struct HeldParts<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
}

/// The host's side of the engine.
pub trait Host {
    /// A held message's key, value and application headers, as the host keeps them.
    type Payload;
    /// What the host's own operations raise.
    type Error;
    /// A blob read from the ordering store.
    type Blob: AsRef<[u8]>;

    /// `ch` (at `position`) by topic name, partition and offset, for a warning's text.
    fn describe(&mut self, ch: &Channel, position: Option<i64>) -> String;
    /// A message's key as a detail names it.
    fn describe_key(&mut self, payload: &Self::Payload) -> Result<String, Self::Error>;
    /// Whether anyone listens to [`Host::warn`] (a warning's text is built only then).
    fn wants_warnings(&self) -> bool;
    /// Say a warning to the operator.
    fn warn(&mut self, text: String) -> Result<(), Self::Error>;
    /// The ordering store's value at `key` (a held row's), if any.
    fn held_blob(&mut self, key: &[u8]) -> Result<Option<Self::Blob>, Self::Error>;
    /// The payload of a held message decoded from the store (reserved headers removed).
    fn payload(&mut self, held: &HeldRef<'_>) -> Result<Self::Payload, Self::Error>;
    /// Call `encode` once with the payload's parts as bytes.
    fn lend_parts(
        &mut self,
        payload: &Self::Payload,
        encode: &mut dyn FnMut(HeldParts<'_>),
    ) -> Result<(), Self::Error>;
}
