//! Ordering-state keys and values in the Java implementation's layout, pure Rust.
//!
//! The same records, byte for byte, and the same refusals (diagnosis texts, check order)
//! as the reference `parsley/engine/state_codec.py`; docs/model.md, "The stored form"
//! (Java `OrderingStateCodec`, `ProcessEngine` restore). `channel` is the 20-byte flat
//! form: topic id (16 bytes), then int32 big-endian partition.
//!
//! ```text
//! b"v"                          -> b"\x01"            store format version
//! b"f" + channel                -> int64 BE           covered (fedUpTo); 2^63-1 = fed to end
//! b"c" + channel                -> int64 BE           frontier position
//! b"p" + channel                -> int64 BE           delivered causal past
//! b"n" + UTF-8 topic name       -> channel (20 bytes) name binding, partition 0
//! b"h" + channel + int64 BE pos -> held blob          one held message
//! ```
//!
//! Held blob (version 1):
//!
//! ```text
//! u8 01 | int64 timestamp_ms | u8 flags (bit0 key null, bit1 value null)
//! | [int32 keyLen, key] | [int32 valueLen, value]
//! | int32 headerCount | headerCount x (int32 keyLen, UTF-8 key, int32 valueLen (-1 = null), value)
//! | int32 causeCount | causeCount x (channel, int64 position)
//! ```
//!
//! Every `Err(String)` here is the diagnosis of an `UNKNOWN_ORDERING_STATE_FORMAT` refusal.

use std::fmt;

use crate::wire::{Channel, TopicId, UuidText, FED_TO_END};

pub const TAG_VERSION: u8 = b'v';
pub const TAG_FED: u8 = b'f';
pub const TAG_FRONTIER: u8 = b'c';
pub const TAG_PAST: u8 = b'p';
pub const TAG_NAME: u8 = b'n';
pub const TAG_HELD: u8 = b'h';
pub const VERSION_KEY: &[u8] = b"v";
pub const VERSION_VALUE: &[u8] = b"\x01";
pub const HELD_BLOB_VERSION: u8 = 1;
pub const CHANNEL_BYTES: usize = 20;
pub const CHANNEL_KEY_BYTES: usize = 1 + CHANNEL_BYTES;
pub const HELD_KEY_BYTES: usize = 1 + CHANNEL_BYTES + 8;
const CAUSE_BYTES: usize = CHANNEL_BYTES + 8;
const FLAG_KEY_NULL: u8 = 1;
const FLAG_VALUE_NULL: u8 = 2;
const CORRUPT_HELD: &str = "corrupt held blob: ";

mod held;
mod image;
#[cfg(test)]
mod tests;

pub use self::held::*;
pub use self::image::*;

/// Whether `tag` is a state tag (every tag but the version's): any of them without `v`
/// means a lost changelog head.
pub fn is_state_tag(tag: u8) -> bool {
    matches!(tag, TAG_FED | TAG_FRONTIER | TAG_PAST | TAG_NAME | TAG_HELD)
}

// ------------------------------------------------------------------ keys

/// The 20-byte flat form of a channel.
pub fn channel_bytes(ch: &Channel) -> [u8; CHANNEL_BYTES] {
    let mut out = [0u8; CHANNEL_BYTES];
    out[..16].copy_from_slice(&ch.topic);
    out[16..].copy_from_slice(&ch.partition.to_be_bytes());
    out
}

fn tagged(tag: u8, ch: &Channel) -> [u8; CHANNEL_KEY_BYTES] {
    let mut k = [0u8; CHANNEL_KEY_BYTES];
    k[0] = tag;
    k[1..].copy_from_slice(&channel_bytes(ch));
    k
}

/// `b"f"` + channel: the key of a channel's covered position (21 bytes).
pub fn fed_key(ch: &Channel) -> [u8; CHANNEL_KEY_BYTES] {
    tagged(TAG_FED, ch)
}

/// `b"c"` + channel: the key of a channel's frontier position (21 bytes).
pub fn frontier_key(ch: &Channel) -> [u8; CHANNEL_KEY_BYTES] {
    tagged(TAG_FRONTIER, ch)
}

/// `b"p"` + channel: the key of a channel's delivered past (21 bytes).
pub fn past_key(ch: &Channel) -> [u8; CHANNEL_KEY_BYTES] {
    tagged(TAG_PAST, ch)
}

/// `b"h"` + channel: the prefix of every held key on a channel (21 bytes).
pub fn held_prefix(ch: &Channel) -> [u8; CHANNEL_KEY_BYTES] {
    tagged(TAG_HELD, ch)
}

/// `b"h"` + channel + int64 BE position: the key of one held message (29 bytes). The
/// position must be 0..2^63-2 (the reference raises `ValueError` otherwise).
pub fn held_key(ch: &Channel, position: i64) -> [u8; HELD_KEY_BYTES] {
    debug_assert!((0..FED_TO_END).contains(&position));
    let mut k = [0u8; HELD_KEY_BYTES];
    k[..CHANNEL_KEY_BYTES].copy_from_slice(&tagged(TAG_HELD, ch));
    k[CHANNEL_KEY_BYTES..].copy_from_slice(&position.to_be_bytes());
    k
}

/// `b"n"` + the UTF-8 name: the key binding a topic name to its identity.
pub fn name_key(topic: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + topic.len());
    k.push(TAG_NAME);
    k.extend_from_slice(topic.as_bytes());
    k
}

/// How a diagnosis names a key's tag: `'x'` when printable ASCII, else `0xNN`.
pub struct TagText<'a>(pub &'a [u8]);

impl fmt::Display for TagText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.first() {
            None => f.write_str("(empty key)"),
            Some(&t) if t > 0x20 && t < 0x7F => write!(f, "'{}'", t as char),
            Some(&t) => write!(f, "0x{t:02x}"),
        }
    }
}

fn read_i32(data: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(data[at..at + 4].try_into().expect("4 bytes"))
}

fn read_i64(data: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(data[at..at + 8].try_into().expect("8 bytes"))
}

fn topic_at(data: &[u8], at: usize) -> TopicId {
    data[at..at + 16].try_into().expect("16 bytes")
}

/// The channel at byte `offset` of a key (20 bytes there); a negative partition is
/// `corrupt ordering key: negative partition P for tag <tag of key>`.
fn channel_at(data: &[u8], offset: usize, key: &[u8]) -> Result<Channel, String> {
    let partition = read_i32(data, offset + 16);
    if partition < 0 {
        return Err(format!(
            "corrupt ordering key: negative partition {partition} for tag {}",
            TagText(key)
        ));
    }
    Ok(Channel::new(topic_at(data, offset), partition))
}

/// The channel named by an `f`/`c`/`p` key.
pub fn channel_of_key(key: &[u8]) -> Result<Channel, String> {
    if key.len() != CHANNEL_KEY_BYTES {
        return Err(format!(
            "corrupt ordering key: length {} for tag {}",
            key.len(),
            TagText(key)
        ));
    }
    channel_at(key, 1, key)
}

/// The (channel, position) named by a held key.
pub fn held_key_parts(key: &[u8]) -> Result<(Channel, i64), String> {
    if key.len() != HELD_KEY_BYTES {
        return Err(format!("corrupt held key: length {}", key.len()));
    }
    let ch = channel_at(key, 1, key)?;
    let position = read_i64(key, CHANNEL_KEY_BYTES);
    if !(0..FED_TO_END).contains(&position) {
        return Err(format!(
            "corrupt held key: position {position} on {ch}, which no channel can assign"
        ));
    }
    Ok((ch, position))
}

/// The topic name of an `n` key.
pub fn name_of_key(key: &[u8]) -> Result<&str, String> {
    if key.len() < 2 {
        return Err("corrupt ordering key: empty topic name for tag 'n'".to_string());
    }
    std::str::from_utf8(&key[1..])
        .map_err(|_| "corrupt ordering key: topic name is not UTF-8 for tag 'n'".to_string())
}

// ------------------------------------------------------------------ values

/// An `f`/`c`/`p` value: int64 big-endian.
pub fn encode_long(v: i64) -> [u8; 8] {
    v.to_be_bytes()
}

/// Read an `f`/`c`/`p` value (exactly 8 bytes).
pub fn decode_long(value: &[u8]) -> Result<i64, String> {
    if value.len() != 8 {
        return Err(format!(
            "corrupt ordering value: length {} where 8 bytes were written",
            value.len()
        ));
    }
    Ok(read_i64(value, 0))
}

/// An `n` value: the topic's channel form with partition 0 (20 bytes).
pub fn encode_binding(topic: &TopicId) -> [u8; CHANNEL_BYTES] {
    channel_bytes(&Channel::new(*topic, 0))
}

/// The topic id in an `n` value of topic `name` (exactly 20 bytes).
pub fn decode_binding(value: &[u8], name: &str) -> Result<TopicId, String> {
    if value.len() != CHANNEL_BYTES {
        return Err(format!(
            "corrupt ordering value: name binding for '{name}' has length {} where \
             {CHANNEL_BYTES} bytes were written",
            value.len()
        ));
    }
    Ok(topic_at(value, 0))
}

const CORRUPT_ROW: &str = "receipt refuses negative positions, so this row is corrupt ordering \
     state. Reset the process's state and group offsets deliberately to proceed.";
const RESET: &str = "Reset the process's state and group offsets deliberately to proceed.";
/// How a held row inconsistent with its channel's coverage opens: the runbook's corrupt
/// entry it is (docs/runbooks.md, UNKNOWN_ORDERING_STATE_FORMAT).
const OUT_OF_ORDER: &str = "held messages restored out of position order: ";
const LOST_HEAD: &str = "ordering state present without its format version entry; the \
     earliest records of the ordering changelog have been lost, so this state is incomplete \
     and cannot be trusted. Check the changelog topic's cleanup.policy, then reset the \
     process's state and group offsets deliberately to proceed.";
const UNKNOWN_VERSION: &str = "ordering store format not understood by this build";

fn forged(constraint: u32) -> String {
    format!(
        "this state absorbed a forged causes header before receipt refused it (wire-format \
         constraint {constraint}). Reset the process's state and group offsets deliberately \
         to proceed."
    )
}

fn held_unfed() -> String {
    format!(
        "every held message is fed before it is held, so this row is corrupt ordering \
         state. {RESET}"
    )
}

/// Read an `f` (coverage, `fedUpTo`) value of channel `ch`: 0..=2^63-1, the fed-to-end
/// sentinel verbatim; negative is corrupt.
pub fn decode_coverage(ch: &Channel, value: &[u8]) -> Result<i64, String> {
    let position = decode_long(value)?;
    if position < 0 {
        return Err(format!(
            "restored coverage names position {position} on {ch}, which no channel can \
             assign; {CORRUPT_ROW}"
        ));
    }
    Ok(position)
}

fn assignable(ch: &Channel, position: i64, what: &str) -> Result<i64, String> {
    if position == FED_TO_END {
        return Err(format!(
            "restored {what} names position {position} on {ch}, which no channel can assign; {}",
            forged(7)
        ));
    }
    if position < 0 {
        return Err(format!(
            "restored {what} names position {position} on {ch}, which no channel can assign; \
             {CORRUPT_ROW}"
        ));
    }
    Ok(position)
}
