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

use std::collections::HashMap;
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

fn tagged(tag: u8, ch: &Channel) -> Vec<u8> {
    let mut k = Vec::with_capacity(HELD_KEY_BYTES);
    k.push(tag);
    k.extend_from_slice(&channel_bytes(ch));
    k
}

/// `b"f"` + channel: the key of a channel's covered position (21 bytes).
pub fn fed_key(ch: &Channel) -> Vec<u8> {
    tagged(TAG_FED, ch)
}

/// `b"c"` + channel: the key of a channel's frontier position (21 bytes).
pub fn frontier_key(ch: &Channel) -> Vec<u8> {
    tagged(TAG_FRONTIER, ch)
}

/// `b"p"` + channel: the key of a channel's delivered past (21 bytes).
pub fn past_key(ch: &Channel) -> Vec<u8> {
    tagged(TAG_PAST, ch)
}

/// `b"h"` + channel: the prefix of every held key on a channel (21 bytes).
pub fn held_prefix(ch: &Channel) -> Vec<u8> {
    tagged(TAG_HELD, ch)
}

/// `b"h"` + channel + int64 BE position: the key of one held message (29 bytes). The
/// position must be 0..2^63-2 (the reference raises `ValueError` otherwise).
pub fn held_key(ch: &Channel, position: i64) -> Vec<u8> {
    debug_assert!((0..FED_TO_END).contains(&position));
    let mut k = tagged(TAG_HELD, ch);
    k.extend_from_slice(&position.to_be_bytes());
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

// ------------------------------------------------------------------ held blobs

/// One held message, owned (what [`encode_held`] writes).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct HeldMessage {
    pub timestamp_ms: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub causes: Vec<(Channel, i64)>,
}

/// One held message borrowed from its blob (what [`decode_held`] reads).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct HeldRef<'a> {
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>,
    pub causes: Vec<(Channel, i64)>,
}

impl HeldRef<'_> {
    /// An owned copy.
    pub fn to_owned(&self) -> HeldMessage {
        HeldMessage {
            timestamp_ms: self.timestamp_ms,
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.map(<[u8]>::to_vec),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(<[u8]>::to_vec)))
                .collect(),
            causes: self.causes.clone(),
        }
    }
}

/// The exact length of [`encode_held`]'s output.
pub fn held_size(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&str, Option<&[u8]>)],
    causes: usize,
) -> usize {
    let mut n = 1 + 8 + 1 + 4 + 4 + CAUSE_BYTES * causes;
    n += key.map_or(0, |k| 4 + k.len()) + value.map_or(0, |v| 4 + v.len());
    for (k, v) in headers {
        n += 8 + k.len() + v.map_or(0, <[u8]>::len);
    }
    n
}

/// Encode a held message as a version-1 blob from its parts (borrowed), causes in the
/// given order (pass channel order to match Java's bytes).
///
/// Lengths must fit an int32 (a Kafka record is far below 2 GiB).
pub fn encode_held_parts(
    timestamp_ms: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&str, Option<&[u8]>)],
    causes: &[(Channel, i64)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(held_size(key, value, headers, causes.len()));
    out.push(HELD_BLOB_VERSION);
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    let flags = if key.is_none() { FLAG_KEY_NULL } else { 0 }
        | if value.is_none() { FLAG_VALUE_NULL } else { 0 };
    out.push(flags);
    for part in [key, value].into_iter().flatten() {
        out.extend_from_slice(&(part.len() as i32).to_be_bytes());
        out.extend_from_slice(part);
    }
    out.extend_from_slice(&(headers.len() as i32).to_be_bytes());
    for (k, v) in headers {
        out.extend_from_slice(&(k.len() as i32).to_be_bytes());
        out.extend_from_slice(k.as_bytes());
        match v {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
        }
    }
    out.extend_from_slice(&(causes.len() as i32).to_be_bytes());
    for (ch, position) in causes {
        out.extend_from_slice(&channel_bytes(ch));
        out.extend_from_slice(&position.to_be_bytes());
    }
    out
}

/// Encode a held message as a version-1 blob (docs/model.md, "The stored form").
pub fn encode_held(m: &HeldMessage) -> Vec<u8> {
    let headers: Vec<(&str, Option<&[u8]>)> = m
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect();
    encode_held_parts(
        m.timestamp_ms,
        m.key.as_deref(),
        m.value.as_deref(),
        &headers,
        &m.causes,
    )
}

/// A visitor of a held blob's parts, so validation allocates nothing and a caller can
/// build its own values.
pub trait HeldSink<'a> {
    fn header(&mut self, key: &'a str, value: Option<&'a [u8]>);
    fn cause(&mut self, channel: Channel, position: i64);
}

/// Discards every part: validation only.
pub struct Discard;

impl<'a> HeldSink<'a> for Discard {
    #[inline]
    fn header(&mut self, _key: &'a str, _value: Option<&'a [u8]>) {}
    #[inline]
    fn cause(&mut self, _channel: Channel, _position: i64) {}
}

impl<'a> HeldSink<'a> for HeldRef<'a> {
    fn header(&mut self, key: &'a str, value: Option<&'a [u8]>) {
        self.headers.push((key, value));
    }
    fn cause(&mut self, channel: Channel, position: i64) {
        self.causes.push((channel, position));
    }
}

/// The fixed part of a held blob: (timestamp, key, value).
pub type HeldHead<'a> = (i64, Option<&'a [u8]>, Option<&'a [u8]>);

struct Reader<'a> {
    blob: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.blob.len() - self.i
    }

    fn int(&mut self, truncated_at: &str) -> Result<i32, String> {
        if self.i + 4 > self.blob.len() {
            return Err(format!("{CORRUPT_HELD}truncated at {truncated_at}"));
        }
        let v = read_i32(self.blob, self.i);
        self.i += 4;
        Ok(v)
    }

    fn sized(&mut self, what: &str) -> Result<&'a [u8], String> {
        let length = self.int(&format!("{what} length"))?;
        if length < 0 || length as usize > self.remaining() {
            return Err(format!(
                "{CORRUPT_HELD}{what} length {length} with {} bytes remaining",
                self.remaining()
            ));
        }
        let start = self.i;
        self.i += length as usize;
        Ok(&self.blob[start..self.i])
    }
}

/// Parse a held blob, handing headers and causes to `sink`; returns the fixed part.
///
/// Refusals (each `corrupt held blob: ...`, in the reference's order): `version N`,
/// `truncated at N bytes` (under 10 bytes), `flags 0xNN carry unknown bits`, `truncated at
/// <what> length`, `<what> length L with R bytes remaining`, `truncated at header count`,
/// `header count H with R bytes remaining` (negative or more than R/8), `truncated at
/// header value length`, `header value length L with R bytes remaining`, `header key is not
/// UTF-8` (judged after the header's value), `truncated at cause count`, `cause count C
/// does not match R bytes remaining`, `cause names negative partition P`.
pub fn parse_held<'a, S: HeldSink<'a>>(
    blob: &'a [u8],
    sink: &mut S,
) -> Result<HeldHead<'a>, String> {
    let n = blob.len();
    if n < 10 {
        if n > 0 && blob[0] != HELD_BLOB_VERSION {
            return Err(format!("{CORRUPT_HELD}version {}", blob[0]));
        }
        return Err(format!("{CORRUPT_HELD}truncated at {n} bytes"));
    }
    if blob[0] != HELD_BLOB_VERSION {
        return Err(format!("{CORRUPT_HELD}version {}", blob[0]));
    }
    let timestamp = read_i64(blob, 1);
    let flags = blob[9];
    if flags & !(FLAG_KEY_NULL | FLAG_VALUE_NULL) != 0 {
        return Err(format!(
            "{CORRUPT_HELD}flags 0x{flags:02x} carry unknown bits"
        ));
    }
    let mut r = Reader { blob, i: 10 };
    let key = if flags & FLAG_KEY_NULL != 0 {
        None
    } else {
        Some(r.sized("key")?)
    };
    let value = if flags & FLAG_VALUE_NULL != 0 {
        None
    } else {
        Some(r.sized("value")?)
    };
    let count = r.int("header count")?;
    if count < 0 || count as usize > r.remaining() / 8 {
        return Err(format!(
            "{CORRUPT_HELD}header count {count} with {} bytes remaining",
            r.remaining()
        ));
    }
    for _ in 0..count {
        let raw_key = r.sized("header key")?;
        let length = r.int("header value length")?;
        let mut hvalue = None;
        if length != -1 {
            if length < 0 || length as usize > r.remaining() {
                return Err(format!(
                    "{CORRUPT_HELD}header value length {length} with {} bytes remaining",
                    r.remaining()
                ));
            }
            hvalue = Some(&blob[r.i..r.i + length as usize]);
            r.i += length as usize;
        }
        let hkey = std::str::from_utf8(raw_key)
            .map_err(|_| format!("{CORRUPT_HELD}header key is not UTF-8"))?;
        sink.header(hkey, hvalue);
    }
    let count = r.int("cause count")?;
    let rest = r.remaining();
    if count < 0 || (count as usize).checked_mul(CAUSE_BYTES) != Some(rest) {
        return Err(format!(
            "{CORRUPT_HELD}cause count {count} does not match {rest} bytes remaining"
        ));
    }
    let mut at = r.i;
    for _ in 0..count {
        let partition = read_i32(blob, at + 16);
        if partition < 0 {
            return Err(format!(
                "{CORRUPT_HELD}cause names negative partition {partition}"
            ));
        }
        sink.cause(
            Channel::new(topic_at(blob, at), partition),
            read_i64(blob, at + 20),
        );
        at += CAUSE_BYTES;
    }
    Ok((timestamp, key, value))
}

/// Decode a held-message blob (refusals as [`parse_held`]).
pub fn decode_held(blob: &[u8]) -> Result<HeldRef<'_>, String> {
    let mut m = HeldRef::default();
    let (timestamp, key, value) = parse_held(blob, &mut m)?;
    m.timestamp_ms = timestamp;
    m.key = key;
    m.value = value;
    Ok(m)
}

/// Check a held blob as [`decode_held`] does, building nothing.
pub fn validate_held(blob: &[u8]) -> Result<(), String> {
    parse_held(blob, &mut Discard).map(|_| ())
}

// ------------------------------------------------------------------ image

/// A map that keeps first-insertion order (as a Python dict does).
#[derive(Clone, Debug)]
pub struct OrderedMap<K, V> {
    pub entries: Vec<(K, V)>,
    index: HashMap<K, usize>,
}

impl<K, V> Default for OrderedMap<K, V> {
    fn default() -> Self {
        OrderedMap {
            entries: Vec::new(),
            index: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + std::hash::Hash, V> OrderedMap<K, V> {
    /// Set `key` to `value`; a key already present keeps its place.
    pub fn insert(&mut self, key: K, value: V) {
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = value,
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value));
            }
        }
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match self.index.get(key) {
            Some(&i) => Some(&mut self.entries[i].1),
            None => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// One task's decoded, validated ordering state (held bodies not kept); maps iterate in
/// the order the keys arrived.
#[derive(Clone, Debug, Default)]
pub struct OrderingImage {
    pub has_version: bool,
    pub fed: OrderedMap<Channel, i64>,
    pub frontier: OrderedMap<Channel, i64>,
    pub past: OrderedMap<Channel, i64>,
    pub names: OrderedMap<String, TopicId>,
    pub held: OrderedMap<Channel, Vec<i64>>,
}

impl OrderingImage {
    /// True when no state entry (besides the version) was present.
    pub fn is_empty(&self) -> bool {
        self.fed.is_empty()
            && self.frontier.is_empty()
            && self.past.is_empty()
            && self.names.is_empty()
            && self.held.is_empty()
    }
}

/// Streaming reader of one task's ordering state: [`ImageLoader::push`] every (key, value)
/// in ascending key order, then [`ImageLoader::finish`]. Each held blob is validated as it
/// arrives and only its position kept.
///
/// The version decides whether anything else can be read, so it is judged first whatever
/// order the keys arrive in: after the first refused entry, the rest are scanned for the
/// version entry only, and that refusal is returned by `finish` after the version verdict
/// (the reference `load_image`; Java's `ProcessEngine` constructor).
#[derive(Default)]
pub struct ImageLoader {
    image: OrderingImage,
    version: Option<Vec<u8>>,
    state_seen: bool,
    failed: Option<String>,
    channels: HashMap<[u8; CHANNEL_BYTES], Channel>,
}

impl ImageLoader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed one live entry.
    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        if self.failed.is_some() {
            if key == VERSION_KEY {
                self.version = Some(value.to_vec());
            } else if key.first().map_or(false, |&t| is_state_tag(t)) {
                self.state_seen = true;
            }
            return;
        }
        match self.one_entry(key, value) {
            Ok(()) => {
                if key == VERSION_KEY {
                    self.version = Some(value.to_vec());
                }
            }
            Err(diagnosis) => {
                self.failed = Some(diagnosis);
                self.state_seen = key.first().map_or(false, |&t| is_state_tag(t));
            }
        }
    }

    /// The image, or the refusal the reference `load_image` raises.
    pub fn finish(self) -> Result<OrderingImage, String> {
        let mut image = self.image;
        match self.version {
            Some(v) => {
                if v != VERSION_VALUE {
                    return Err(UNKNOWN_VERSION.to_string());
                }
                image.has_version = true;
            }
            None => {
                if self.state_seen || !image.is_empty() {
                    return Err(LOST_HEAD.to_string());
                }
            }
        }
        if let Some(failed) = self.failed {
            return Err(failed);
        }
        for (ch, positions) in &image.held.entries {
            check_held_within_coverage(ch, positions, image.fed.get(ch).copied())?;
        }
        Ok(image)
    }

    fn channel(&mut self, key: &[u8]) -> Result<Channel, String> {
        let raw: [u8; CHANNEL_BYTES] = key[1..CHANNEL_KEY_BYTES].try_into().expect("20 bytes");
        if let Some(ch) = self.channels.get(&raw) {
            return Ok(*ch);
        }
        let ch = channel_at(key, 1, key)?;
        self.channels.insert(raw, ch);
        Ok(ch)
    }

    fn one_entry(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let tag = match key.first() {
            Some(&t) => t,
            None => return Err("corrupt ordering key: length 0".to_string()),
        };
        match tag {
            TAG_HELD => {
                if key.len() != HELD_KEY_BYTES {
                    return Err(format!("corrupt held key: length {}", key.len()));
                }
                let ch = self.channel(key)?;
                let position = read_i64(key, CHANNEL_KEY_BYTES);
                if !(0..FED_TO_END).contains(&position) {
                    return Err(format!(
                        "corrupt held key: position {position} on {ch}, which no channel can \
                         assign"
                    ));
                }
                match self.image.held.get_mut(&ch) {
                    None => self.image.held.insert(ch, vec![position]),
                    Some(positions) => {
                        let last = *positions.last().expect("non-empty");
                        if last >= position {
                            return Err(format!(
                                "held messages restored out of position order on {ch} ({last} \
                                 before {position}); the store's scan broke its ordering \
                                 contract"
                            ));
                        }
                        positions.push(position);
                    }
                }
                validate_held(value)
            }
            TAG_FED | TAG_FRONTIER | TAG_PAST => {
                if key.len() != CHANNEL_KEY_BYTES {
                    return Err(format!(
                        "corrupt ordering key: length {} for tag '{}'",
                        key.len(),
                        tag as char
                    ));
                }
                let ch = self.channel(key)?;
                if tag == TAG_FED {
                    let covered = decode_coverage(&ch, value)?;
                    self.image.fed.insert(ch, covered);
                    return Ok(());
                }
                let position = decode_long(value)?;
                if tag == TAG_FRONTIER {
                    if ch.topic == [0u8; 16] {
                        return Err(format!(
                            "restored frontier names the reserved zero topic id; {}",
                            forged(5)
                        ));
                    }
                    let p = assignable(&ch, position, "frontier")?;
                    self.image.frontier.insert(ch, p);
                } else {
                    let p = assignable(&ch, position, "delivered past")?;
                    self.image.past.insert(ch, p);
                }
                Ok(())
            }
            TAG_NAME => {
                let name = name_of_key(key)?;
                let topic = decode_binding(value, name)?;
                self.image.names.insert(name.to_string(), topic);
                Ok(())
            }
            TAG_VERSION => {
                if key.len() != 1 {
                    return Err(format!(
                        "corrupt ordering key: length {} for tag 'v'",
                        key.len()
                    ));
                }
                Ok(())
            }
            _ => Err(format!(
                "corrupt ordering key: unknown tag {}",
                TagText(key)
            )),
        }
    }
}

fn check_held_within_coverage(
    ch: &Channel,
    positions: &[i64],
    fed: Option<i64>,
) -> Result<(), String> {
    // A message is fed (coverage raised to its position) before it is held, and a channel
    // is fed to its end only with nothing held. A hold above coverage would restore ahead of
    // a lower position fed later and deliver out of order.
    let fed = match fed {
        Some(f) => f,
        None => {
            return Err(format!(
                "held message at {ch}@{} on a channel with no coverage row; {}",
                positions[0],
                held_unfed()
            ))
        }
    };
    if fed == FED_TO_END {
        return Err(format!(
            "held message at {ch}@{} on a channel recorded as no longer existing \
             (fedUpTo={fed}); a channel is fed to its end only with nothing held, so this row \
             is corrupt ordering state. {RESET}",
            positions[0]
        ));
    }
    if let Some(&above) = positions.iter().find(|&&p| p > fed) {
        return Err(format!(
            "held message at {ch}@{above} above its channel's coverage (fedUpTo={fed}); {}",
            held_unfed()
        ));
    }
    Ok(())
}

/// Parse and validate every entry of one task's ordering state (refusals as the reference
/// `load_image`; docs/model.md, "The stored form", "Checks when state is restored").
pub fn load_image<'a, I>(items: I) -> Result<OrderingImage, String>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    let mut loader = ImageLoader::new();
    for (k, v) in items {
        loader.push(k, v);
    }
    loader.finish()
}

/// The topic id text of a name binding, for callers formatting diagnoses.
pub fn topic_text(topic: &TopicId) -> String {
    UuidText(topic).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(last: u8) -> TopicId {
        let mut t = [0u8; 16];
        t[7] = 1;
        t[15] = last;
        t
    }

    fn sample() -> HeldMessage {
        HeldMessage {
            timestamp_ms: 1_700_000_000_123,
            key: Some(b"k".to_vec()),
            value: None,
            headers: vec![("a".into(), Some(b"xy".to_vec())), ("\u{e9}".into(), None)],
            causes: vec![
                (Channel::new(topic(1), 3), 41),
                (Channel::new(topic(2), 0), 7),
            ],
        }
    }

    #[test]
    fn held_round_trip_and_layout() {
        let m = sample();
        let blob = encode_held(&m);
        assert_eq!(
            blob.len(),
            held_size(Some(b"k"), None, &[("a", Some(b"xy")), ("\u{e9}", None)], 2)
        );
        assert_eq!(blob[0], 1);
        assert_eq!(blob[9], FLAG_VALUE_NULL);
        assert_eq!(&blob[10..15], &[0, 0, 0, 1, b'k']);
        assert_eq!(decode_held(&blob).unwrap().to_owned(), m);
        validate_held(&blob).unwrap();
        let empty = HeldMessage {
            timestamp_ms: -1,
            key: None,
            value: Some(vec![]),
            ..Default::default()
        };
        let blob = encode_held(&empty);
        assert_eq!(blob.len(), 1 + 8 + 1 + 4 + 4 + 4);
        assert_eq!(decode_held(&blob).unwrap().to_owned(), empty);
    }

    fn held_err(blob: &[u8]) -> String {
        let e = decode_held(blob).unwrap_err();
        assert_eq!(validate_held(blob).unwrap_err(), e);
        e.strip_prefix(CORRUPT_HELD).expect("prefix").to_string()
    }

    #[test]
    fn held_refusals() {
        assert_eq!(held_err(b""), "truncated at 0 bytes");
        assert_eq!(held_err(b"\x01\x00"), "truncated at 2 bytes");
        assert_eq!(held_err(b"\x02\x00"), "version 2");
        let mut head = vec![1u8, 0, 0, 0, 0, 0, 0, 0, 5];
        head.push(4);
        assert_eq!(held_err(&head), "flags 0x04 carry unknown bits");
        head[9] = 0;
        assert_eq!(held_err(&head), "truncated at key length");
        let mut b = head.clone();
        b.extend_from_slice(&(-2i32).to_be_bytes());
        assert_eq!(held_err(&b), "key length -2 with 0 bytes remaining");
        head[9] = 3;
        assert_eq!(held_err(&head), "truncated at header count");
        let mut b = head.clone();
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&[0; 7]);
        assert_eq!(held_err(&b), "header count 1 with 7 bytes remaining");
        let mut b = head.clone();
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        b.push(0xff);
        b.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(held_err(&b), "header key is not UTF-8");
        let mut b = head.clone();
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        b.push(0xff);
        b.extend_from_slice(&(-5i32).to_be_bytes());
        assert_eq!(
            held_err(&b),
            "header value length -5 with 0 bytes remaining"
        );
        let mut b = head.clone();
        b.extend_from_slice(&0i32.to_be_bytes());
        assert_eq!(held_err(&b), "truncated at cause count");
        b.extend_from_slice(&1i32.to_be_bytes());
        assert_eq!(
            held_err(&b),
            "cause count 1 does not match 0 bytes remaining"
        );
        let mut c = b.clone();
        c.extend_from_slice(&topic(1));
        c.extend_from_slice(&(-1i32).to_be_bytes());
        c.extend_from_slice(&0i64.to_be_bytes());
        assert_eq!(held_err(&c), "cause names negative partition -1");
    }

    fn long(v: i64) -> Vec<u8> {
        v.to_be_bytes().to_vec()
    }

    #[test]
    fn image_loads_and_refuses() {
        let ch = Channel::new(topic(1), 0);
        let blob = encode_held(&sample());
        let items: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (frontier_key(&ch), long(5)),
            (fed_key(&ch), long(9)),
            (held_key(&ch, 7), blob.clone()),
            (held_key(&ch, 9), blob.clone()),
            (name_key("orders"), encode_binding(&topic(1)).to_vec()),
            (past_key(&ch), long(3)),
            (b"v".to_vec(), b"\x01".to_vec()),
        ];
        let image = load_image(items.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).unwrap();
        assert!(image.has_version);
        assert_eq!(image.fed.get(&ch), Some(&9));
        assert_eq!(image.held.get(&ch), Some(&vec![7, 9]));
        assert_eq!(image.names.get(&"orders".to_string()), Some(&topic(1)));

        let load = |items: &[(Vec<u8>, Vec<u8>)]| {
            load_image(items.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
        };
        // Without the version: the lost head, whatever else is wrong.
        let no_version: Vec<_> = items[..6].to_vec();
        assert!(load(&no_version)
            .unwrap_err()
            .starts_with("ordering state present without"));
        let mut bad = no_version.clone();
        bad[0].1 = long(-1);
        assert!(load(&bad)
            .unwrap_err()
            .starts_with("ordering state present without"));
        bad.push((b"v".to_vec(), b"\x02".to_vec()));
        assert_eq!(load(&bad).unwrap_err(), UNKNOWN_VERSION);
        let mut bad = items.clone();
        bad[0].1 = long(-1);
        assert_eq!(
            load(&bad).unwrap_err(),
            format!(
                "restored frontier names position -1 on {ch}, which no channel can assign; \
                 {CORRUPT_ROW}"
            )
        );
        let mut bad = items.clone();
        bad[1].1 = long(8);
        assert_eq!(
            load(&bad).unwrap_err(),
            format!(
                "held message at {ch}@9 above its channel's coverage (fedUpTo=8); {}",
                held_unfed()
            )
        );
        let mut bad = items.clone();
        bad[3].0 = held_key(&ch, 7);
        assert!(load(&bad)
            .unwrap_err()
            .starts_with("held messages restored out of position"));
        let bad = vec![(vec![b'z', 1], vec![]), (b"v".to_vec(), b"\x01".to_vec())];
        assert_eq!(
            load(&bad).unwrap_err(),
            "corrupt ordering key: unknown tag 'z'"
        );
        let bad = vec![(vec![0x7f], vec![]), (b"v".to_vec(), b"\x01".to_vec())];
        assert_eq!(
            load(&bad).unwrap_err(),
            "corrupt ordering key: unknown tag 0x7f"
        );
        assert!(load(&[]).unwrap().is_empty());
    }
}
