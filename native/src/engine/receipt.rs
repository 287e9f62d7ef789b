//! Receipt (`ProcessEngine.receive`, docs/model.md "Receipt"): the causes header's
//! budget and decoding, the in-execution feed order, merging every cause into the
//! frontier, the coverage checks that drop replays, cross-partition causes, and holding
//! the accepted message.

use std::cell::Cell;
use std::rc::Rc;

use super::fx::{FxMap, FxSet};
use super::host::{Fault, Host, Refusal};
use super::state::{Causes, Core, Decoded, Held, LastHeader, SABOTAGE_IGNORE_CROSS_PARTITION};
use crate::wire::{decode_causes, position_slots, Channel, TopicId, FED_TO_END};

/// The header carrying a message's causes (docs/wire-format.md).
pub const CAUSES_HEADER: &str = "parsley.causes";
/// Headers under this prefix are Parsley's: never handed to the application.
pub const RESERVED_PREFIX: &str = "parsley.";
const DECODE_CACHE_ENTRIES: usize = 64;
/// Headers up to this size (bytes) are kept per rank to patch the next one (a relay's
/// 16-entry header is 180 bytes); a larger one is decoded whole every time.
const PATCH_MAX_BYTES: usize = 4096;

/// What a message's headers say about its causes.
#[derive(Clone, Copy, Debug)]
pub enum CausesHeader<'a> {
    Absent,
    /// Two `parsley.causes` headers.
    Duplicate,
    /// A `parsley.causes` header with a null value.
    Null,
    Value(&'a [u8]),
}

/// What a header's key makes of it at receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderRole {
    Causes,
    /// Another `parsley.*` header: dropped.
    Reserved,
    Application,
}

/// The role of a header with key `key`.
pub fn header_role(key: &str) -> HeaderRole {
    if key == CAUSES_HEADER {
        HeaderRole::Causes
    } else if key.starts_with(RESERVED_PREFIX) {
        HeaderRole::Reserved
    } else {
        HeaderRole::Application
    }
}

/// Whether a `parsley.causes` header can carry `position` (0..2^63-2, as
/// `parsley.wire.encode_causes`): receipt takes no other.
pub fn encodable_position(position: i64) -> bool {
    position >= 0 && position != FED_TO_END
}

/// The causes on channels of a received topic that are not received (`rank`): another
/// task's partitions.
fn foreign_of(
    received_topics: &FxSet<TopicId>,
    rank: &FxMap<Channel, usize>,
    causes: &[(Channel, i64)],
) -> Vec<(Channel, i64)> {
    causes
        .iter()
        .filter(|(c, _)| received_topics.contains(&c.topic) && !rank.contains_key(c))
        .copied()
        .collect()
}

impl<P> Core<P> {
    /// Receive the message at position `q` of rank `r` (timestamp `ts` ms); true when
    /// accepted and held, false when dropped as a replay of a covered position.
    #[allow(clippy::too_many_arguments)]
    pub fn feed<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
        r: usize,
        q: i64,
        ts: i64,
        header: CausesHeader<'_>,
        payload: P,
    ) -> Result<bool, Fault<H::Error>> {
        self.require_started()?;
        let ch = self.by_rank[r];
        let raw = match header {
            CausesHeader::Absent => None,
            CausesHeader::Duplicate => {
                return Err(Self::undecodable(
                    &ch,
                    q,
                    "duplicate parsley.causes headers",
                ))
            }
            CausesHeader::Null => {
                return Err(Self::undecodable(
                    &ch,
                    q,
                    "causes header present with null value",
                ))
            }
            CausesHeader::Value(raw) => Some(raw),
        };

        // -- causes: budget before decode
        let mut entry: Option<Rc<Decoded>> = None;
        if let Some(data) = raw {
            if data.len() > self.config.budget {
                return Err(Self::refused(Refusal::HeaderOverBudget {
                    ch,
                    position: q,
                    size: data.len(),
                    budget: self.config.budget,
                }));
            }
            entry = Some(self.header_decoding(r, &ch, q, data)?);
        }
        let causes: Causes = match &entry {
            Some(e) => e.causes.clone(),
            None => self.no_causes.clone(),
        };

        // -- in-execution order
        if let Some(before) = self.fed_exec[r] {
            if q <= before {
                return Err(Self::refused(Refusal::FedAfterPosition {
                    ch,
                    position: q,
                    fed_before: before,
                }));
            }
        }
        self.fed_exec[r] = Some(q);

        // -- receipt merges every cause into the frontier, before the duplicate check
        if let Some(e) = &entry {
            let epoch = self.epoch;
            // Merged once per epoch: a header seen again adds nothing until a prune. A
            // patch of a header merged in this epoch merges only the entries it changed
            // (the frontier only rises within an epoch, so the others add nothing).
            if !e.causes.is_empty() && e.merged_epoch.get() != epoch {
                if !self.changed.is_empty() {
                    let changed = std::mem::take(&mut self.changed);
                    let merged = changed
                        .iter()
                        .try_for_each(|&k| self.merge_one(host, e.causes[k].0, e.causes[k].1));
                    self.changed = changed;
                    merged?;
                } else {
                    self.merge_causes(host, &e.causes)?;
                }
                e.merged_epoch.set(epoch);
            }
        }

        // -- coverage: dead channel, invariant guard, replay drop
        if let Some(&fed) = self.fed.get(&ch) {
            if q <= fed {
                return self.covered_feed(&ch, q, fed);
            }
        }

        if let Some(e) = &entry {
            if !e.foreign.is_empty() && self.config.sabotage != SABOTAGE_IGNORE_CROSS_PARTITION {
                self.cross_partition(host, r, q, &payload, &e.foreign)?;
            }
        }

        // -- accept: cover, hold
        self.fed.insert(ch, q);
        self.dirty_f.add(ch);
        self.bodies.insert(
            (r, q),
            Held {
                ts,
                payload,
                causes: causes.clone(),
            },
        );
        self.body_order.push((r, q));
        self.queues[r].push_back(q);
        self.held_total += 1;
        if self.queues[r].len() == 1 {
            self.head_causes[r] = Some(causes);
            self.add_candidate(r);
            self.raise_settled(r, q - 1);
        }
        Ok(true)
    }

    /// The decoding of causes header value `data`, fed at position `q` of rank `r`.
    ///
    /// A relay's headers on one channel differ from one message to the next only in
    /// positions (its own frontier moved), so a value the length of the rank's previous
    /// one that differs from it only inside position fields is patched: the previous
    /// decoding with those positions replaced, each checked as the decoder checks it (a
    /// position it refuses sends the value to the decoder, for the refusal's diagnosis).
    /// Any other value comes from the cache or the decoder, as before. Leaves in `changed`
    /// the entries a patch changed when only they need merging, else clears it.
    fn header_decoding<E>(
        &mut self,
        r: usize,
        ch: &Channel,
        q: i64,
        data: &[u8],
    ) -> Result<Rc<Decoded>, Fault<E>> {
        self.changed.clear();
        if let Some(last) = &self.last_header[r] {
            if last.bytes.len() == data.len() {
                if last.bytes[..] == *data {
                    return Ok(last.decoded.clone());
                }
                if let Some(e) = self.patched(r, data) {
                    return Ok(e);
                }
            }
        }
        let e = match self.decoded.get(data) {
            Some(e) => e.clone(),
            None => self.decode(ch, q, data)?,
        };
        if data.len() <= PATCH_MAX_BYTES {
            let last = self.last_header[r].get_or_insert_with(|| LastHeader {
                bytes: Vec::new(),
                decoded: e.clone(),
                slots: Vec::new(),
            });
            last.bytes.clear();
            last.bytes.extend_from_slice(data);
            last.decoded = e.clone();
            if !position_slots(data, &mut last.slots) {
                self.last_header[r] = None; // accepted by the decoder, so never here
            }
        }
        Ok(e)
    }

    /// `data` as rank `r`'s previous header with changed positions (listed in `changed`
    /// when the previous one was merged in this epoch), or `None` when it differs
    /// elsewhere or a changed position is one the decoder refuses (`changed` cleared).
    fn patched(&mut self, r: usize, data: &[u8]) -> Option<Rc<Decoded>> {
        let last = self.last_header[r].as_mut()?;
        let changed = &mut self.changed;
        let mut start = 0;
        for (k, &slot) in last.slots.iter().enumerate() {
            let slot = slot as usize;
            let end = slot + 8;
            let differs = last.bytes[slot..end] != data[slot..end];
            if last.bytes[start..slot] != data[start..slot]
                || (differs
                    && !encodable_position(i64::from_be_bytes(
                        data[slot..end].try_into().expect("8 bytes"),
                    )))
            {
                changed.clear();
                return None;
            }
            if differs {
                changed.push(k);
            }
            start = end;
        }
        if last.bytes[start..] != data[start..] {
            changed.clear();
            return None;
        }
        let mut causes = last.decoded.causes.to_vec();
        for &k in changed.iter() {
            let slot = last.slots[k] as usize;
            causes[k].1 = i64::from_be_bytes(data[slot..slot + 8].try_into().expect("8 bytes"));
        }
        let foreign: Causes = if last.decoded.foreign.is_empty() {
            last.decoded.foreign.clone() // the same channels: still none foreign
        } else {
            foreign_of(&self.received_topics, &self.rank, &causes).into()
        };
        if last.decoded.merged_epoch.get() != self.epoch {
            changed.clear(); // the previous one was not merged in this epoch: merge all
        }
        let e = Rc::new(Decoded {
            causes: causes.into(),
            foreign,
            merged_epoch: Cell::new(-1),
        });
        last.bytes.copy_from_slice(data);
        last.decoded = e.clone();
        Some(e)
    }

    /// Decode a header value not in the cache, and cache it.
    fn decode<E>(&mut self, ch: &Channel, q: i64, data: &[u8]) -> Result<Rc<Decoded>, Fault<E>> {
        let decoded = match decode_causes(data) {
            Ok(d) => d,
            Err(diagnosis) => return Err(Self::undecodable(ch, q, &diagnosis)),
        };
        if self.decoded.len() >= DECODE_CACHE_ENTRIES {
            self.decoded.clear();
        }
        let foreign = foreign_of(&self.received_topics, &self.rank, &decoded);
        let e = Rc::new(Decoded {
            causes: decoded.into(),
            foreign: foreign.into(),
            merged_epoch: Cell::new(-1),
        });
        self.decoded.insert(data.into(), e.clone());
        Ok(e)
    }

    /// A feed at or below coverage `fed`: refused on a deleted channel or above the
    /// session floor (the host contradicts the engine), else dropped as a replay.
    fn covered_feed<E>(&self, ch: &Channel, q: i64, fed: i64) -> Result<bool, Fault<E>> {
        if fed == FED_TO_END {
            return Err(Self::refused(Refusal::FedGoneChannel {
                ch: *ch,
                position: q,
            }));
        }
        let floor_at = self.floor.as_ref().and_then(|f| f.get(ch).copied());
        if floor_at.is_none() || q > floor_at.unwrap() {
            return Err(Self::refused(Refusal::CoveredPositionFed {
                ch: *ch,
                position: q,
                fed_up_to: fed,
                floor: floor_at,
            }));
        }
        Ok(false)
    }

    pub(super) fn undecodable<E>(ch: &Channel, q: i64, diagnosis: &str) -> Fault<E> {
        Self::refused(Refusal::Undecodable {
            ch: *ch,
            position: q,
            diagnosis: diagnosis.to_string(),
        })
    }

    /// Warn once when the frontier's size reaches 80% of the budget.
    pub(super) fn check_warning<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
    ) -> Result<(), Fault<H::Error>> {
        if self.warned {
            return Ok(());
        }
        let size = self.encoding.size();
        if size * 5 >= self.config.budget * 4 {
            self.warned = true;
            if host.wants_warnings() {
                let text = format!(
                    "the causal frontier reached {size} bytes ({} channels), at least 80% of \
                     the metadata budget of {} bytes; beyond the budget the process stops \
                     with METADATA_BUDGET_EXCEEDED",
                    self.frontier.len(),
                    self.config.budget
                );
                host.warn(text).map_err(Fault::Host)?;
            }
        }
        Ok(())
    }

    /// `ch` enters the frontier at `position`; refused beyond the budget.
    pub(super) fn merge_new<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
        ch: Channel,
        position: i64,
    ) -> Result<(), Fault<H::Error>> {
        self.frontier.set(ch, position);
        self.dirty_c.add(ch);
        self.encoding.added(&ch);
        self.header_generation += 1;
        let size = self.encoding.size();
        if size > self.config.budget {
            return Err(Self::refused(Refusal::FrontierOverBudget {
                size,
                channels: self.frontier.len(),
                budget: self.config.budget,
            }));
        }
        self.check_warning(host)
    }

    /// Raise the frontier to `position` on `ch` (entering it if new).
    pub(super) fn merge_one<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
        ch: Channel,
        position: i64,
    ) -> Result<(), Fault<H::Error>> {
        match self.frontier.get_mut(&ch) {
            None => self.merge_new(host, ch, position)?,
            Some(current) => {
                if position > *current {
                    *current = position;
                    self.dirty_c.add(ch);
                    self.encoding.moved.push(ch);
                    self.header_generation += 1;
                }
            }
        }
        Ok(())
    }

    fn merge_causes<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
        causes: &[(Channel, i64)],
    ) -> Result<(), Fault<H::Error>> {
        for &(c, p) in causes {
            self.merge_one(host, c, p)?;
        }
        Ok(())
    }

    /// Causes on partitions another task of the process reads: refused, or carried
    /// unenforced with one warning per pair of partitions.
    fn cross_partition<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
        r: usize,
        q: i64,
        payload: &P,
        foreign: &[(Channel, i64)],
    ) -> Result<(), Fault<H::Error>> {
        let ch = self.by_rank[r];
        let key_text = host.describe_key(payload).map_err(Fault::Host)?;
        if self.config.cross_refuse {
            let (cause, cause_at) = foreign[0];
            return Err(Self::refused(Refusal::CrossPartitionCause {
                ch,
                position: q,
                key: key_text,
                cause,
                cause_at,
            }));
        }
        self.cross_count += 1;
        for &(cause, position) in foreign {
            if !self.cross_warned.insert((r, cause)) {
                continue;
            }
            if host.wants_warnings() {
                let text = format!(
                    "the record at {} ({key_text}) names a cause at {}, a partition another \
                     task of this process reads: the cause is carried unenforced (the \
                     received topics' partition counts differ, or cross_partition_causes = \
                     \"warn\"). Said once per pair of partitions; counted in status as \
                     cross_partition_causes; cross_partition_causes = \"refuse\" makes it a \
                     refusal (docs/runbooks.md, CROSS_PARTITION_CAUSE)",
                    host.describe(&ch, Some(q)),
                    host.describe(&cause, Some(position))
                );
                host.warn(text).map_err(Fault::Host)?;
            }
        }
        Ok(())
    }
}
