//! The frontier's encoding, kept incrementally: its size in bytes and its header bytes.
//!
//! The Rust form of `parsley/engine/frontier.py`: positions are fixed-width int64s, so the
//! canonical `parsley.causes` encoding (docs/wire-format.md, "Grammar") is kept in a buffer
//! with the offset of each channel's position; a moved position is re-packed in place, and
//! a channel entering or leaving re-encodes at the next header. The size follows the
//! formula of docs/wire-format.md, "Size", updated as channels enter and leave.

use super::fx::FxMap;
use crate::wire::{put_varint, varint_size, Channel, TopicId};

const NEW_TOPIC_BYTES: usize = 17;

/// Size and canonical bytes of one frontier's encoding.
#[derive(Default)]
pub struct FrontierEncoding {
    topic_counts: FxMap<TopicId, u32>,
    body: usize,
    buf: Vec<u8>,
    layout: Option<FxMap<Channel, usize>>,
    /// Channels whose position rose since the last header.
    pub moved: Vec<Channel>,
}

impl FrontierEncoding {
    /// Account for `ch` entering the frontier.
    pub fn added(&mut self, ch: &Channel) {
        let n = {
            let count = self.topic_counts.entry(ch.topic).or_insert(0);
            *count += 1;
            *count
        };
        let grow = if n == 1 {
            NEW_TOPIC_BYTES
        } else {
            varint_size(n) - varint_size(n - 1)
        };
        self.body += grow + varint_size(ch.partition as u32) + 8;
        self.layout = None;
    }

    /// Account for `ch` leaving the frontier (it must have been added).
    pub fn removed(&mut self, ch: &Channel) {
        let n = self.topic_counts.get(&ch.topic).copied().unwrap_or(1) - 1;
        let shrink = if n == 0 {
            self.topic_counts.remove(&ch.topic);
            NEW_TOPIC_BYTES
        } else {
            self.topic_counts.insert(ch.topic, n);
            varint_size(n + 1) - varint_size(n)
        };
        self.body -= shrink + varint_size(ch.partition as u32) + 8;
        self.layout = None;
    }

    /// The encoded size in bytes (2 for an empty frontier).
    pub fn size(&self) -> usize {
        1 + varint_size(self.topic_counts.len() as u32) + self.body
    }

    /// Bring the buffer up to date with `get`'s positions; true when its bytes changed.
    pub fn refresh<'a>(
        &mut self,
        entries: impl Iterator<Item = (&'a Channel, i64)>,
        get: impl Fn(&Channel) -> i64,
    ) -> bool {
        if self.layout.is_none() {
            self.relayout(entries);
            return true;
        }
        if self.moved.is_empty() {
            return false;
        }
        let layout = self.layout.as_ref().expect("layout present");
        for ch in self.moved.drain(..) {
            let at = layout[&ch];
            self.buf[at..at + 8].copy_from_slice(&get(&ch).to_be_bytes());
        }
        true
    }

    /// The current bytes (valid after `refresh`).
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Bound `moved` when no header is asked for: past `entries` moves, forget them and
    /// re-encode at the next header.
    pub fn trim(&mut self, entries: usize) {
        if self.moved.len() > entries {
            self.moved.clear();
            self.layout = None;
        }
    }

    fn relayout<'a>(&mut self, entries: impl Iterator<Item = (&'a Channel, i64)>) {
        let mut sorted: Vec<(Channel, i64)> = entries.map(|(c, p)| (*c, p)).collect();
        sorted.sort_unstable_by_key(|a| a.0);
        let mut buf = Vec::with_capacity(self.size());
        let mut layout = FxMap::default();
        buf.push(1u8);
        let mut topics = 0u32;
        let mut i = 0;
        while i < sorted.len() {
            let mut j = i;
            while j < sorted.len() && sorted[j].0.topic == sorted[i].0.topic {
                j += 1;
            }
            topics += 1;
            i = j;
        }
        put_varint(&mut buf, topics);
        let mut i = 0;
        while i < sorted.len() {
            let topic = sorted[i].0.topic;
            let mut j = i;
            while j < sorted.len() && sorted[j].0.topic == topic {
                j += 1;
            }
            buf.extend_from_slice(&topic);
            put_varint(&mut buf, (j - i) as u32);
            for (ch, position) in &sorted[i..j] {
                put_varint(&mut buf, ch.partition as u32);
                layout.insert(*ch, buf.len());
                buf.extend_from_slice(&position.to_be_bytes());
            }
            i = j;
        }
        self.buf = buf;
        self.layout = Some(layout);
        self.moved.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{encode_causes, encoded_size};
    use std::collections::BTreeMap;

    fn ch(topic: u8, partition: i32) -> Channel {
        let mut id = [0u8; 16];
        id[15] = topic;
        id[0] = topic.wrapping_mul(37);
        Channel::new(id, partition)
    }

    /// The kept bytes and size equal a fresh canonical encoding after every change.
    #[test]
    fn patched_bytes_and_size_equal_a_fresh_encoding() {
        let mut enc = FrontierEncoding::default();
        let mut frontier: BTreeMap<Channel, i64> = BTreeMap::new();
        let mut seed = 7u64;
        for step in 0..2_000 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let c = ch((seed >> 33) as u8 % 9 + 1, ((seed >> 45) % 200) as i32);
            let p = ((seed >> 20) % 1_000_000) as i64;
            match frontier.get(&c).copied() {
                None => {
                    frontier.insert(c, p);
                    enc.added(&c);
                }
                Some(old) if p > old => {
                    frontier.insert(c, p);
                    enc.moved.push(c);
                }
                Some(_) if step % 7 == 0 => {
                    frontier.remove(&c);
                    enc.removed(&c);
                }
                Some(_) => {}
            }
            let entries: Vec<(Channel, i64)> = frontier.iter().map(|(c, p)| (*c, *p)).collect();
            assert_eq!(enc.size(), encoded_size(&entries));
            if step % 3 == 0 {
                enc.refresh(frontier.iter().map(|(c, p)| (c, *p)), |c| frontier[c]);
                assert_eq!(enc.bytes(), encode_causes(&entries).as_slice());
            }
        }
    }

    #[test]
    fn trim_forgets_moves_and_re_encodes() {
        let mut enc = FrontierEncoding::default();
        let a = ch(1, 0);
        enc.added(&a);
        enc.refresh(std::iter::once((&a, 5)), |_| 5);
        for _ in 0..3 {
            enc.moved.push(a);
        }
        enc.trim(1);
        assert!(enc.moved.is_empty());
        assert!(enc.refresh(std::iter::once((&a, 9)), |_| 9));
        assert_eq!(enc.bytes(), encode_causes(&[(a, 9)]).as_slice());
    }
}
