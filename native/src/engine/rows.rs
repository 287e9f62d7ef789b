//! Keys and values of the ordering changelog (docs/model.md, "The stored form"): one-byte
//! tags, 20-byte channels (16-byte topic id, int32 big-endian partition), int64
//! big-endian numbers, and the version-1 held blob. Byte for byte what
//! `parsley/engine/state_codec.py` writes.

use crate::wire::Channel;

pub const TAG_FED: u8 = b'f';
pub const TAG_FRONTIER: u8 = b'c';
pub const TAG_PAST: u8 = b'p';
pub const TAG_HELD: u8 = b'h';

/// `tag` + channel, 21 bytes (the `f`, `c` and `p` keys).
pub fn channel_key(tag: u8, ch: &Channel) -> [u8; 21] {
    let mut key = [0u8; 21];
    key[0] = tag;
    key[1..17].copy_from_slice(&ch.topic);
    key[17..21].copy_from_slice(&ch.partition.to_be_bytes());
    key
}

/// `h` + channel + int64 BE position, 29 bytes.
pub fn held_key(ch: &Channel, position: i64) -> [u8; 29] {
    let mut key = [0u8; 29];
    key[0] = TAG_HELD;
    key[1..17].copy_from_slice(&ch.topic);
    key[17..21].copy_from_slice(&ch.partition.to_be_bytes());
    key[21..29].copy_from_slice(&position.to_be_bytes());
    key
}

const FLAG_KEY_NULL: u8 = 1;
const FLAG_VALUE_NULL: u8 = 2;

/// Encode a held message as a version-1 blob: version, int64 timestamp, null flags, key
/// and value (int32 length + bytes when present), int32 header count, each header's
/// UTF-8 key and value (int32 length, -1 for a null value), int32 cause count, each cause
/// as topic id, int32 partition, int64 position.
pub fn encode_held(
    timestamp_ms: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&[u8], Option<&[u8]>)],
    causes: &[(Channel, i64)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        18 + key.map_or(0, |k| k.len() + 4)
            + value.map_or(0, |v| v.len() + 4)
            + causes.len() * 28
            + headers
                .iter()
                .map(|(k, v)| 8 + k.len() + v.map_or(0, |v| v.len()))
                .sum::<usize>(),
    );
    out.push(1u8);
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    let flags = if key.is_none() { FLAG_KEY_NULL } else { 0 }
        | if value.is_none() { FLAG_VALUE_NULL } else { 0 };
    out.push(flags);
    for part in [key, value].into_iter().flatten() {
        out.extend_from_slice(&(part.len() as i32).to_be_bytes());
        out.extend_from_slice(part);
    }
    out.extend_from_slice(&(headers.len() as i32).to_be_bytes());
    for (hkey, hvalue) in headers {
        out.extend_from_slice(&(hkey.len() as i32).to_be_bytes());
        out.extend_from_slice(hkey);
        match hvalue {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
        }
    }
    out.extend_from_slice(&(causes.len() as i32).to_be_bytes());
    for (ch, position) in causes {
        out.extend_from_slice(&ch.topic);
        out.extend_from_slice(&ch.partition.to_be_bytes());
        out.extend_from_slice(&position.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_tag_channel_position_big_endian() {
        let mut id = [0u8; 16];
        id[15] = 0x0b;
        let c = Channel::new(id, 2);
        let key = held_key(&c, 258);
        assert_eq!(key[0], b'h');
        assert_eq!(&key[1..17], &id);
        assert_eq!(&key[17..21], &[0, 0, 0, 2]);
        assert_eq!(&key[21..29], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(channel_key(TAG_FED, &c)[..], key[..21].iter().enumerate()
            .map(|(i, b)| if i == 0 { b'f' } else { *b }).collect::<Vec<u8>>()[..]);
    }

    /// The byte layout docs/model.md gives for a held blob, with both null flags.
    #[test]
    fn held_blob_layout() {
        let blob = encode_held(5, None, Some(b"v"), &[(b"x", None)], &[]);
        let mut want = vec![1u8];
        want.extend_from_slice(&5i64.to_be_bytes());
        want.push(1); // key null
        want.extend_from_slice(&1i32.to_be_bytes());
        want.push(b'v');
        want.extend_from_slice(&1i32.to_be_bytes());
        want.extend_from_slice(&1i32.to_be_bytes());
        want.push(b'x');
        want.extend_from_slice(&(-1i32).to_be_bytes());
        want.extend_from_slice(&0i32.to_be_bytes());
        assert_eq!(blob, want);
    }
}
