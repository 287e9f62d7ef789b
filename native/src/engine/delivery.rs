//! Decisions and delivery (docs/model.md, "The decision rule", "Hold-back"): a held
//! channel's head delivers once every cause on a received channel is settled; a head
//! that waits is parked on its first blocker and decided again when that channel's
//! settled position reaches it. Bodies written to the store are read back by key.

use std::cmp::Reverse;
use std::rc::Rc;

use super::host::{Fault, Host, Refusal};
use super::receipt::RESERVED_PREFIX;
use super::state::{
    Causes, Core, Delivered, Held, SABOTAGE_EAGER_DELIVERY, SABOTAGE_IGNORE_ONE_CAUSE,
};
use crate::state_codec;
use crate::wire::Channel;

impl<P> Core<P> {
    /// Apply the next delivery: `(rank, position, body)`, or `None` when no head is ready.
    /// The frontier takes the position, the delivered past takes the causes, and the
    /// channel's next head becomes a candidate.
    pub fn deliver_one<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
    ) -> Result<Option<Delivered<P>>, Fault<H::Error>> {
        if !self.candidates.is_empty() {
            self.decide_candidates(host)?;
        }
        let r = match self.ready.pop() {
            Some(Reverse(r)) => r,
            None => return Ok(None),
        };
        let ch = self.by_rank[r];
        let q = *self.queues[r].front().expect("a ready head");
        let body = match self.bodies.remove(&(r, q)) {
            Some(body) => body,
            None => {
                let cached = matches!(&self.loaded, Some((lr, lq, _)) if *lr == r && *lq == q);
                let held = if cached {
                    self.loaded.take().expect("the loaded body").2
                } else {
                    let held = self.fetch(host, r, q)?;
                    self.loaded = None;
                    held
                };
                // Its row is deleted at the next commit.
                self.dirty_h.push((r, q));
                held
            }
        };
        self.queues[r].pop_front();
        self.held_total -= 1;
        self.head_causes[r] = None;

        self.merge_one(host, ch, q)?;
        let causes = &body.causes;
        // Consecutive messages often share one decoded cause list: merge it once.
        let same = matches!(&self.last_past, Some(last) if Rc::ptr_eq(last, causes));
        if !causes.is_empty() && !same {
            for &(c, p) in causes.iter() {
                let higher = match self.past.get(&c) {
                    None => p > -1,
                    Some(have) => p > have,
                };
                if higher {
                    self.past.set(c, p);
                    self.dirty_p.add(c);
                }
            }
            self.last_past = Some(causes.clone());
        }
        if let Some(&head) = self.queues[r].front() {
            self.add_candidate(r);
            self.raise_settled(r, head - 1);
        } else if let Some(&fed) = self.fed.get(&ch) {
            self.raise_settled(r, fed);
        }
        Ok(Some((r, q, body)))
    }

    /// The `parsley.causes` value every send of the current step carries, and its
    /// generation (unchanged while the bytes are); refused beyond the budget.
    pub fn causes_header<E>(&mut self) -> Result<(u64, &[u8]), Fault<E>> {
        let frontier = &self.frontier;
        if self
            .encoding
            .refresh(frontier.iter(), |c| frontier.get(c).unwrap_or(0))
        {
            self.header_generation += 1;
        }
        let n = self.encoding.bytes().len();
        if n > self.config.budget {
            return Err(Self::refused(Refusal::EmissionOverBudget {
                size: n,
                channels: self.frontier.len(),
                budget: self.config.budget,
            }));
        }
        Ok((self.header_generation, self.encoding.bytes()))
    }

    /// The causes of rank `r`'s head (read from the store if its body is not in memory),
    /// or `None` when nothing is held there.
    pub fn head_causes<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
        r: usize,
    ) -> Result<Option<Causes>, Fault<H::Error>> {
        match self.queues[r].front() {
            Some(&head) => self.causes_of_head(host, r, head).map(Some),
            None => Ok(None),
        }
    }

    fn causes_of_head<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
        r: usize,
        q: i64,
    ) -> Result<Causes, Fault<H::Error>> {
        if let Some(c) = &self.head_causes[r] {
            return Ok(c.clone());
        }
        let causes = match self.bodies.get(&(r, q)) {
            Some(body) => body.causes.clone(),
            None => match &self.loaded {
                Some((lr, lq, body)) if *lr == r && *lq == q => body.causes.clone(),
                _ => {
                    let held = self.fetch(host, r, q)?;
                    let causes = held.causes.clone();
                    self.loaded = Some((r, q, held));
                    causes
                }
            },
        };
        self.head_causes[r] = Some(causes.clone());
        Ok(causes)
    }

    fn decide_candidates<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
    ) -> Result<(), Fault<H::Error>> {
        let candidates = std::mem::take(&mut self.candidates);
        for &r in &candidates {
            self.is_candidate[r] = false;
        }
        for r in candidates {
            let q = match self.queues[r].front() {
                Some(&q) => q,
                None => continue,
            };
            let causes = self.causes_of_head(host, r, q)?;
            match self.first_blocker(&causes) {
                None => self.ready.push(Reverse(r)),
                Some((b, p)) => {
                    self.waiting[b].push(Reverse((p, r)));
                    // A waiting head's body is not needed until it is decided again.
                    self.loaded = None;
                    // Counted once: heads only move forward on a channel.
                    if q > self.waited_at[r] {
                        self.waited_at[r] = q;
                        self.waited += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// The first cause on a received channel that is not settled: (blocker rank, position).
    fn first_blocker(&self, causes: &[(Channel, i64)]) -> Option<(usize, i64)> {
        let mut skip_one = self.config.sabotage == SABOTAGE_IGNORE_ONE_CAUSE;
        if self.config.sabotage == SABOTAGE_EAGER_DELIVERY {
            return None;
        }
        for (c, p) in causes {
            if let Some(&r) = self.rank.get(c) {
                if skip_one {
                    skip_one = false;
                    continue;
                }
                if self.settled[r] < *p {
                    return Some((r, *p));
                }
            }
        }
        None
    }

    /// A held body from the store, decoded by `crate::state_codec::decode_held` (the same
    /// checks and diagnoses as `parsley.engine.state_codec.decode_held`), without its
    /// `parsley.*` headers (the application never sees them).
    fn fetch<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
        r: usize,
        q: i64,
    ) -> Result<Held<P>, Fault<H::Error>> {
        let ch = self.by_rank[r];
        let blob = match host
            .held_blob(&state_codec::held_key(&ch, q))
            .map_err(Fault::Host)?
        {
            Some(blob) => blob,
            None => {
                return Err(Self::refused(Refusal::HeldBodyMissing { ch, position: q }));
            }
        };
        let mut held = state_codec::decode_held(blob.as_ref())
            .map_err(|diagnosis| Self::refused(Refusal::CorruptHeld { diagnosis }))?;
        held.headers
            .retain(|(k, _)| !k.starts_with(RESERVED_PREFIX));
        let payload = host.payload(&held).map_err(Fault::Host)?;
        Ok(Held {
            ts: held.timestamp_ms,
            payload,
            causes: held.causes.into(),
        })
    }
}
