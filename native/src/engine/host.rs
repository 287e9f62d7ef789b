//! What the engine core asks of its host, and how it fails.
//!
//! The core knows channels, positions and bytes; the host (the PyO3 adapter
//! `crate::py_engine`, or a test's) owns the message payloads (key, value, headers), the
//! ordering store, the warning callback and the rendering of channels in refusal details.

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

/// A failed engine call: a fail-closed refusal, a call out of sequence (Python's
/// `RuntimeError`), or an error the host raised while the core called it.
#[derive(Debug, PartialEq, Eq)]
pub enum Fault<E> {
    Refused { reason: Reason, detail: String },
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

    /// `ch` (at `position`) by topic name, partition and offset, for a refusal's detail.
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
