//! Held blobs (version 1, the layout in `mod.rs`): encode, decode, validate.

use super::*;

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
