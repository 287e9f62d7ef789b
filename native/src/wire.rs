//! The `parsley.causes` header codec, pure Rust (no PyO3 here).
//!
//! Version 1 of the frozen grammar, byte for byte (docs/wire-format.md, "Grammar" and
//! "Constraints" 1-7; Java `CausesCodec`):
//!
//! ```text
//! value          := version topicCount group*
//! version        := uint8 = 0x01
//! topicCount     := varint >= 0
//! group          := topicId partitionCount pair*
//! topicId        := 16 bytes (Kafka topic id, big-endian), never all zero
//! partitionCount := varint >= 1
//! pair           := partition position
//! partition      := varint >= 0
//! position       := int64 big-endian, 0 <= position < 2^63 - 1
//! ```
//!
//! Varints are unsigned base-128, low bits first, minimal, 0..2^31-1. Topics strictly
//! ascend (unsigned bytes), partitions strictly ascend within a topic, nothing trails the
//! last group. A malformed value is refused with exactly the diagnosis text the
//! reference decoder (`parsley/wire.py`) puts in its `UNDECODABLE_METADATA` refusal, checks
//! in the same order.

use std::fmt;

/// A Kafka topic id: 16 bytes, most significant first (the UUID's big-endian bytes).
pub type TopicId = [u8; 16];

/// The position no header may carry: 2^63 - 1 means "fed to its end" inside Parsley
/// (docs/wire-format.md, constraint 7).
pub const FED_TO_END: i64 = i64::MAX;

/// Largest varint value (and partition number): 2^31 - 1, Java's non-negative int range.
pub const MAX_VARINT: u32 = i32::MAX as u32;

/// The value of a header carrying no causes: version 1, zero topics.
pub const EMPTY_CAUSES: [u8; 2] = [0x01, 0x00];

/// The version byte leading every value (constraint 1).
pub const FORMAT_VERSION: u8 = 1;

pub(crate) const TRUNCATED: &str = "truncated causes header";

/// One channel: a topic (by id) and a partition.
///
/// Ordered as on the wire: topic id as 16 unsigned bytes, then partition
/// (docs/wire-format.md, constraint 4). Partitions are 0..2^31-1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Channel {
    pub topic: TopicId,
    pub partition: i32,
}

impl Channel {
    /// The channel of `topic` and `partition`.
    pub fn new(topic: TopicId, partition: i32) -> Self {
        Channel { topic, partition }
    }
}

/// A topic id in the canonical UUID text form, `8-4-4-4-12` lowercase hex, as Python's
/// `uuid.UUID.__str__` and Java's `Uuid`-as-UUID render it in diagnoses.
pub struct UuidText<'a>(pub &'a TopicId);

impl fmt::Display for UuidText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 36];
        let mut k = 0;
        for (i, b) in self.0.iter().enumerate() {
            if i == 4 || i == 6 || i == 8 || i == 10 {
                out[k] = b'-';
                k += 1;
            }
            out[k] = HEX[(b >> 4) as usize];
            out[k + 1] = HEX[(b & 0xF) as usize];
            k += 2;
        }
        // The buffer holds only ASCII.
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

/// `<topic uuid>-<partition>`: how details name a channel (Java's `Channel.toString`,
/// Python's `ChannelId.__str__`).
impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", UuidText(&self.topic), self.partition)
    }
}

/// Read a multi-byte varint starting at `i`; return (value, next index).
///
/// Mirrors the reference `_read_varint` (and Java's `readUnsignedVarint`): running out of
/// bytes is truncation; a fifth byte (shift 28) with any bit in mask `F8` is too wide; a
/// terminal zero byte after the first is a non-minimal spelling.
#[inline]
fn read_varint(data: &[u8], mut i: usize, field: &str) -> Result<(u32, usize), String> {
    let n = data.len();
    let mut value: u32 = 0;
    let mut shift: u32 = 0;
    loop {
        if i >= n {
            return Err(TRUNCATED.to_string());
        }
        let b = data[i];
        i += 1;
        if shift == 28 && b & 0xF8 != 0 {
            return Err(format!("{field} varint exceeds the non-negative int range"));
        }
        value |= ((b & 0x7F) as u32) << shift;
        if b & 0x80 == 0 {
            if shift != 0 && b & 0x7F == 0 {
                return Err(format!("non-minimal varint in {field}"));
            }
            return Ok((value, i));
        }
        shift += 7;
    }
}

/// One varint at `i`: the one-byte case inline, the rest through [`read_varint`].
#[inline(always)]
fn varint_at(data: &[u8], i: usize, field: &str) -> Result<(u32, usize), String> {
    match data.get(i) {
        None => Err(TRUNCATED.to_string()),
        Some(&b) if b < 0x80 => Ok((b as u32, i + 1)),
        Some(_) => read_varint(data, i, field),
    }
}

/// A visitor of decoded entries, so a caller can build its own values (the PyO3 wrapper
/// builds Python objects) without an intermediate vector.
pub trait CausesSink {
    /// A new topic group begins (called before its entries).
    fn topic(&mut self, topic: &TopicId);
    /// One entry of the current topic, in channel order; `position` is 0..2^63-2.
    fn entry(&mut self, topic: &TopicId, partition: i32, position: i64);
}

impl CausesSink for Vec<(Channel, i64)> {
    #[inline]
    fn topic(&mut self, _topic: &TopicId) {}
    #[inline]
    fn entry(&mut self, topic: &TopicId, partition: i32, position: i64) {
        self.push((Channel::new(*topic, partition), position));
    }
}

/// Decode a `parsley.causes` value into `sink`, entry by entry in channel order.
///
/// On error the sink may have received a prefix of the entries; the `Err` carries the
/// diagnosis text of the reference decoder (`parsley/wire.py`, `decode_causes`), checks in
/// its order: version, topic count, then per group the topic id (truncated, zero, order),
/// the partition count (then zero), per pair the partition (then order) and the position
/// (truncated, negative, reserved), trailing bytes last.
pub fn decode_causes_into<S: CausesSink>(data: &[u8], sink: &mut S) -> Result<(), String> {
    let n = data.len();
    if n == 0 {
        return Err(TRUNCATED.to_string());
    }
    if data[0] != FORMAT_VERSION {
        return Err(format!("unknown causes format version {}", data[0]));
    }
    if n < 2 {
        return Err(TRUNCATED.to_string());
    }
    let (topics, mut i) = varint_at(data, 1, "topic count")?;
    let mut previous: Option<&[u8]> = None;
    for group in 0..topics {
        let j = i + 16;
        if j > n {
            return Err(TRUNCATED.to_string());
        }
        let raw = &data[i..j];
        let topic: &TopicId = raw.try_into().expect("16 bytes");
        if *topic == [0u8; 16] {
            return Err(format!(
                "zero topic id at group {group}; the substrate never assigns it to a channel"
            ));
        }
        if let Some(prev) = previous {
            if raw <= prev {
                return Err(format!(
                    "topics not strictly ascending at {}",
                    UuidText(topic)
                ));
            }
        }
        previous = Some(raw);
        sink.topic(topic);
        let count = match data.get(j) {
            None => return Err(TRUNCATED.to_string()),
            Some(0) => {
                return Err(format!("topic {} names zero partitions", UuidText(topic)));
            }
            Some(&c) if c < 0x80 => {
                i = j + 1;
                c as u32
            }
            Some(_) => {
                let (c, next) = read_varint(data, j, "partition count")?;
                i = next;
                c
            }
        };
        let mut last: i64 = -1;
        for _ in 0..count {
            let (partition, next) = varint_at(data, i, "partition")?;
            i = next;
            let partition = partition as i64;
            if partition <= last {
                return Err(format!(
                    "partitions not strictly ascending at {}-{}",
                    UuidText(topic),
                    partition
                ));
            }
            last = partition;
            let raw_position = match data.get(i..i + 8) {
                Some(r) => r,
                None => return Err(TRUNCATED.to_string()),
            };
            i += 8;
            let position = i64::from_be_bytes(raw_position.try_into().expect("8 bytes"));
            if position < 0 || position == FED_TO_END {
                let channel = Channel::new(*topic, partition as i32);
                if position < 0 {
                    return Err(format!("negative position {position} on {channel}"));
                }
                return Err(format!(
                    "position {position} on {channel} is beyond any position a channel can assign"
                ));
            }
            sink.entry(topic, partition as i32, position);
        }
    }
    if i != n {
        return Err(format!(
            "{} trailing bytes after {topics} topic groups",
            n - i
        ));
    }
    Ok(())
}

/// Decode a `parsley.causes` value.
///
/// Returns the causes in channel order (`[]` for `01 00`), or `Err(diagnosis)` with exactly
/// the diagnosis text the Python decoder puts in its `UNDECODABLE_METADATA` refusal
/// (`parsley/wire.py`; docs/wire-format.md, "Constraints"). A null value is the caller's
/// to refuse (`causes header present with null value`); an empty one is
/// `truncated causes header`.
pub fn decode_causes(data: &[u8]) -> Result<Vec<(Channel, i64)>, String> {
    let mut out = Vec::with_capacity(data.len().min(1 << 16) / 9);
    decode_causes_into(data, &mut out)?;
    Ok(out)
}

/// Where each entry's 8-byte position starts in `data`, a value `decode_causes` accepted,
/// in entry order, written to `out` (cleared first); false if `data` is not well formed.
/// The engine uses it to patch a header that differs from the previous one only in
/// positions (`engine::receipt`).
pub fn position_slots(data: &[u8], out: &mut Vec<u32>) -> bool {
    out.clear();
    if data.len() < 2 || data[0] != FORMAT_VERSION {
        return false;
    }
    let (topics, mut i) = match varint_at(data, 1, "topic count") {
        Ok(v) => v,
        Err(_) => return false,
    };
    for _ in 0..topics {
        let (count, next) = match varint_at(data, i + 16, "partition count") {
            Ok(v) => v,
            Err(_) => return false,
        };
        i = next;
        for _ in 0..count {
            let next = match varint_at(data, i, "partition") {
                Ok((_, next)) => next,
                Err(_) => return false,
            };
            if next + 8 > data.len() {
                return false;
            }
            out.push(next as u32);
            i = next + 8;
        }
    }
    i == data.len()
}

/// Width in bytes of `value` as a minimal unsigned varint (1..5).
#[inline]
pub fn varint_size(value: u32) -> usize {
    match value {
        0..=0x7F => 1,
        0x80..=0x3FFF => 2,
        0x4000..=0x1F_FFFF => 3,
        0x20_0000..=0x0FFF_FFFF => 4,
        _ => 5,
    }
}

#[inline]
pub(crate) fn put_varint(buf: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        buf.push((value as u8 & 0x7F) | 0x80);
        value >>= 7;
    }
    buf.push(value as u8);
}

/// Why a cause set cannot be encoded: the reference encoder's `ValueError` text
/// (`parsley/wire.py`, `_group`), judged over `causes` in the given order.
///
/// Returns `None` when every position is in 0..2^63-2, every partition in 0..2^31-1 and no
/// channel names the zero topic id (constraints 5-7: bytes every reader refuses are never
/// written). The position test runs first, on the lowest (if negative) else highest
/// position, naming its first channel in the given order; then the zero topic, naming the
/// first partition given for it.
pub fn encode_error(causes: &[(Channel, i64)]) -> Option<String> {
    if causes.is_empty() {
        return None;
    }
    let low = causes.iter().map(|c| c.1).min().expect("non-empty");
    let high = causes.iter().map(|c| c.1).max().expect("non-empty");
    if low < 0 || high == FED_TO_END {
        let bad = if low < 0 { low } else { high };
        let channel = causes.iter().find(|c| c.1 == bad).expect("present").0;
        return Some(format!(
            "position {bad} on {channel} cannot be encoded: it must be in 0..2^63-2"
        ));
    }
    if let Some((channel, _)) = causes.iter().find(|c| c.0.topic == [0u8; 16]) {
        return Some(format!(
            "channel {channel} names the zero topic id, which no topic can have"
        ));
    }
    if let Some((channel, _)) = causes.iter().find(|c| c.0.partition < 0) {
        return Some(format!(
            "partition must be in 0..2^31-1, got {}",
            channel.partition
        ));
    }
    None
}

/// Encode a cause set in its one canonical form.
///
/// `causes` must be in channel order with no channel twice (sort it first; a debug build
/// asserts this), and encodable ([`encode_error`] is `None`; the caller checks, as the
/// reference encoder raises `ValueError` there). Returns `01 00` for no causes; otherwise
/// the same bytes Java's `CausesCodec.encode` and `parsley.wire.encode_causes` give, of
/// length [`encoded_size`].
pub fn encode_causes(causes: &[(Channel, i64)]) -> Vec<u8> {
    debug_assert!(causes.windows(2).all(|w| w[0].0 < w[1].0), "channel order");
    debug_assert!(encode_error(causes).is_none(), "encodable");
    if causes.is_empty() {
        return EMPTY_CAUSES.to_vec();
    }
    let mut buf = Vec::with_capacity(encoded_size(causes));
    buf.push(FORMAT_VERSION);
    put_varint(&mut buf, topic_count(causes) as u32);
    let mut k = 0;
    while k < causes.len() {
        let topic = &causes[k].0.topic;
        let mut end = k + 1;
        while end < causes.len() && causes[end].0.topic == *topic {
            end += 1;
        }
        buf.extend_from_slice(topic);
        put_varint(&mut buf, (end - k) as u32);
        for (channel, position) in &causes[k..end] {
            let p = channel.partition as u32;
            if p < 0x80 {
                buf.push(p as u8);
            } else {
                put_varint(&mut buf, p);
            }
            buf.extend_from_slice(&position.to_be_bytes());
        }
        k = end;
    }
    buf
}

fn topic_count(causes: &[(Channel, i64)]) -> usize {
    if causes.is_empty() {
        return 0;
    }
    1 + causes
        .windows(2)
        .filter(|w| w[0].0.topic != w[1].0.topic)
        .count()
}

/// Exact length in bytes of [`encode_causes`] for `causes` (in channel order).
///
/// `1 + v(T) + sum over topics [16 + v(n_t) + sum over partitions (v(p) + 8)]`, `v` the
/// varint width (docs/wire-format.md, "Size"; Java `CausesCodec.encodedSize`).
pub fn encoded_size(causes: &[(Channel, i64)]) -> usize {
    let mut size = 1;
    let mut topics = 0usize;
    let mut k = 0;
    while k < causes.len() {
        let topic = &causes[k].0.topic;
        let mut end = k;
        while end < causes.len() && causes[end].0.topic == *topic {
            size += varint_size(causes[end].0.partition as u32) + 8;
            end += 1;
        }
        size += 16 + varint_size((end - k) as u32);
        topics += 1;
        k = end;
    }
    size + varint_size(topics as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn topic(last: u8) -> TopicId {
        let mut t = [0u8; 16];
        t[7] = 1;
        t[15] = last;
        t
    }

    fn err(s: &str) -> String {
        decode_causes(&hex(s)).unwrap_err()
    }

    #[test]
    fn empty_causes() {
        assert_eq!(decode_causes(&EMPTY_CAUSES).unwrap(), vec![]);
        assert_eq!(encode_causes(&[]), EMPTY_CAUSES.to_vec());
        assert_eq!(encoded_size(&[]), 2);
    }

    #[test]
    fn doc_examples_round_trip() {
        let t1: TopicId = hex("0102030405060708090a0b0c0d0e0f10").try_into().unwrap();
        let t2: TopicId = hex("f102030405060708090a0b0c0d0e0f10").try_into().unwrap();
        let one = hex("01 01 0102030405060708090a0b0c0d0e0f10 01 00 0000000000000029");
        let causes = vec![(Channel::new(t1, 0), 41)];
        assert_eq!(decode_causes(&one).unwrap(), causes);
        assert_eq!(encode_causes(&causes), one);
        assert_eq!(encoded_size(&causes), 28);
        let three = hex(
            "01 02 0102030405060708090a0b0c0d0e0f10 02 02 0000000000000029 05 0000000000000007
             f102030405060708090a0b0c0d0e0f10 01 00 0000000000000009",
        );
        let causes = vec![
            (Channel::new(t1, 2), 41),
            (Channel::new(t1, 5), 7),
            (Channel::new(t2, 0), 9),
        ];
        assert_eq!(decode_causes(&three).unwrap(), causes);
        assert_eq!(encode_causes(&causes), three);
        assert_eq!(encoded_size(&causes), 63);
        let wide = hex("01 01 00000000000000010000000000000001 01 ac02 0000000000000007");
        let causes = vec![(Channel::new(topic(1), 300), 7)];
        assert_eq!(decode_causes(&wide).unwrap(), causes);
        assert_eq!(encode_causes(&causes), wide);
        assert_eq!(encoded_size(&causes), wide.len());
    }

    #[test]
    fn doc_refusals() {
        assert_eq!(err("0000"), "unknown causes format version 0");
        assert_eq!(err("0200"), "unknown causes format version 2");
        assert_eq!(err("ff00"), "unknown causes format version 255");
        assert_eq!(err(""), TRUNCATED);
        assert_eq!(err("01"), TRUNCATED);
        assert_eq!(err("01ac"), TRUNCATED);
        assert_eq!(
            err("0101 00000000000000010000000000000001 01 00 fffffffffffffffb"),
            "negative position -5 on 00000000-0000-0001-0000-000000000001-0"
        );
        assert_eq!(
            err("0101 00000000000000000000000000000000 01 00 0000000000000007"),
            "zero topic id at group 0; the substrate never assigns it to a channel"
        );
        assert_eq!(
            err("0101 00000000000000010000000000000001 02 05 0000000000000001 02 0000000000000002"),
            "partitions not strictly ascending at 00000000-0000-0001-0000-000000000001-2"
        );
        assert_eq!(
            err("0101 00000000000000010000000000000001 00"),
            "topic 00000000-0000-0001-0000-000000000001 names zero partitions"
        );
        assert_eq!(err("0181 00"), "non-minimal varint in topic count");
        assert_eq!(err("0100 00"), "1 trailing bytes after 0 topic groups");
        assert_eq!(
            err("0101 00000000000000010000000000000001 01 00 7fffffffffffffff"),
            "position 9223372036854775807 on 00000000-0000-0001-0000-000000000001-0 \
             is beyond any position a channel can assign"
        );
        assert_eq!(
            err(
                "0102 00000000000000010000000000000002 01 00 0000000000000001
                 00000000000000010000000000000001 01 00 0000000000000001"
            ),
            "topics not strictly ascending at 00000000-0000-0001-0000-000000000001"
        );
        assert_eq!(
            err(
                "0102 00000000000000010000000000000002 01 00 0000000000000001
                 00000000000000010000000000000002 01 00 0000000000000001"
            ),
            "topics not strictly ascending at 00000000-0000-0001-0000-000000000002"
        );
    }

    #[test]
    fn varint_refusals() {
        assert_eq!(
            err("01 8080808010"),
            "topic count varint exceeds the non-negative int range"
        );
        assert_eq!(
            err("01 ffffffff08"),
            "topic count varint exceeds the non-negative int range"
        );
        assert_eq!(
            err("01 ffffffff87"),
            "topic count varint exceeds the non-negative int range"
        );
        assert_eq!(err("01 8000"), "non-minimal varint in topic count");
        assert_eq!(err("01 ff"), TRUNCATED);
        // 2^31-1 topics: legal count, runs out of bytes.
        assert_eq!(err("01 ffffffff07"), TRUNCATED);
        let t = "00000000000000010000000000000001";
        assert_eq!(
            err(&format!("0101 {t} 8000")),
            "non-minimal varint in partition count"
        );
        assert_eq!(
            err(&format!("0101 {t} 8080808008")),
            "partition count varint exceeds the non-negative int range"
        );
        assert_eq!(
            err(&format!("0101 {t} 01 8100")),
            "non-minimal varint in partition"
        );
        assert_eq!(
            err(&format!("0101 {t} 01 ffffffff0f")),
            "partition varint exceeds the non-negative int range"
        );
        assert_eq!(err(&format!("0101 {t} 01 ffffff")), TRUNCATED);
        assert_eq!(err(&format!("0101 {t}")), TRUNCATED);
        assert_eq!(err(&format!("0101 {t} 01 00 00000000")), TRUNCATED);
        assert_eq!(err(&format!("0101 {t} 02 00 0000000000000000")), TRUNCATED);
        assert_eq!(err("0101 000000000000000100000000000000"), TRUNCATED);
        // The largest partition decodes.
        let max = hex(&format!("0101 {t} 01 ffffffff07 0000000000000003"));
        let causes = decode_causes(&max).unwrap();
        assert_eq!(causes, vec![(Channel::new(topic(1), i32::MAX), 3)]);
        assert_eq!(encode_causes(&causes), max);
        assert_eq!(encoded_size(&causes), max.len());
    }

    #[test]
    fn check_order_position_before_trailing() {
        let t = "00000000000000010000000000000001";
        // Negative position reported even with trailing bytes after it.
        assert_eq!(
            err(&format!("0101 {t} 01 00 ffffffffffffffff 00")),
            format!("negative position -1 on {}-0", UuidText(&topic(1)))
        );
        assert_eq!(
            err(&format!("0101 {t} 01 00 0000000000000001 0000")),
            "2 trailing bytes after 1 topic groups"
        );
        // Partition order is judged before the position is read.
        assert_eq!(
            err(&format!("0101 {t} 02 05 0000000000000001 05")),
            format!(
                "partitions not strictly ascending at {}-5",
                UuidText(&topic(1))
            )
        );
        // Zero topic judged before order, order before partition count.
        assert_eq!(
            err(&format!(
                "0102 {t} 01 00 0000000000000001 00000000000000000000000000000000"
            )),
            "zero topic id at group 1; the substrate never assigns it to a channel"
        );
    }

    #[test]
    fn canonical_sizes() {
        // docs/wire-format.md "Size": 16 channels, 8 partitions of 2 topics = 180 bytes;
        // 2,000 channels, 8 partitions of 250 topics = 22,253 bytes.
        for (topics, expected) in [(1usize, 91usize), (2, 180), (250, 22_253)] {
            let mut causes = Vec::new();
            for t in 0..topics {
                let mut id = [0u8; 16];
                id[0] = 1;
                id[14] = (t >> 8) as u8;
                id[15] = t as u8;
                for p in 0..8 {
                    causes.push((Channel::new(id, p), (t * 8 + p as usize) as i64));
                }
            }
            let bytes = encode_causes(&causes);
            assert_eq!(bytes.len(), expected);
            assert_eq!(encoded_size(&causes), expected);
            assert_eq!(decode_causes(&bytes).unwrap(), causes);
        }
        // 130 partitions: a two-byte partition count.
        let causes: Vec<_> = (0..130)
            .map(|p| (Channel::new(topic(1), p), p as i64))
            .collect();
        let bytes = encode_causes(&causes);
        assert_eq!(bytes.len(), encoded_size(&causes));
        assert_eq!(&bytes[18..20], &[0x82, 0x01]);
        assert_eq!(decode_causes(&bytes).unwrap(), causes);
    }

    #[test]
    fn encode_errors_as_the_reference() {
        let c = |p| Channel::new(topic(1), p);
        assert_eq!(encode_error(&[(c(0), 0), (c(1), FED_TO_END - 1)]), None);
        assert_eq!(
            encode_error(&[(c(0), 5), (c(1), -3), (c(2), FED_TO_END)]).unwrap(),
            format!(
                "position -3 on {} cannot be encoded: it must be in 0..2^63-2",
                c(1)
            )
        );
        assert_eq!(
            encode_error(&[(c(0), 5), (c(2), FED_TO_END)]).unwrap(),
            format!(
                "position 9223372036854775807 on {} cannot be encoded: it must be in 0..2^63-2",
                c(2)
            )
        );
        assert_eq!(
            encode_error(&[(c(0), 5), (Channel::new([0; 16], 4), 1)]).unwrap(),
            "channel 00000000-0000-0000-0000-000000000000-4 names the zero topic id, \
             which no topic can have"
        );
    }

    /// A small deterministic generator (xorshift), so the mutation test needs no crate.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn mutations_refuse_or_decode_canonically() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut corpus = vec![EMPTY_CAUSES.to_vec()];
        for size in [1usize, 2, 3, 8, 16, 40, 130] {
            let mut causes: Vec<(Channel, i64)> = (0..size)
                .map(|k| {
                    let mut id = [0u8; 16];
                    id[0] = 1 + (k % 3) as u8;
                    let partition = [0, 1, 127, 128, 300, 16384, 1 << 28, i32::MAX][k % 8];
                    (
                        Channel::new(id, partition),
                        (rng.next() >> 1) as i64 % FED_TO_END,
                    )
                })
                .collect();
            causes.sort();
            causes.dedup_by(|a, b| a.0 == b.0);
            corpus.push(encode_causes(&causes));
        }
        let (mut ok, mut refused) = (0, 0);
        for _ in 0..200_000 {
            let mut v = corpus[rng.below(corpus.len())].clone();
            let i = rng.below(v.len());
            match rng.below(4) {
                0 => v[i] = rng.next() as u8,
                1 => v.truncate(i),
                2 => v.insert(i, rng.next() as u8),
                _ => {
                    v.remove(i);
                }
            }
            match decode_causes(&v) {
                Ok(causes) => {
                    assert_eq!(encode_causes(&causes), v);
                    assert_eq!(encoded_size(&causes), v.len());
                    ok += 1;
                }
                Err(_) => refused += 1,
            }
        }
        assert!(ok > 1000 && refused > 1000, "{ok} {refused}");
    }
}
