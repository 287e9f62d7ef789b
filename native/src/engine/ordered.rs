//! Insertion-ordered maps and sets keyed by channel: the Python engine's dicts iterate in
//! insertion order, and the changelog rows it writes follow that order, so the native
//! engine keeps the same order to write byte-identical deltas.

use super::fx::{FxMap, FxSet};
use crate::wire::Channel;

/// A channel -> position map iterating in first-insertion order (a Python dict's order,
/// including re-insertion at the end after a removal).
#[derive(Default)]
pub struct OrderedMap {
    map: FxMap<Channel, i64>,
    order: Vec<Channel>,
}

impl OrderedMap {
    #[inline]
    pub fn get(&self, ch: &Channel) -> Option<i64> {
        self.map.get(ch).copied()
    }

    #[inline]
    pub fn get_mut(&mut self, ch: &Channel) -> Option<&mut i64> {
        self.map.get_mut(ch)
    }

    /// Insert or replace; a new key goes last.
    #[inline]
    pub fn set(&mut self, ch: Channel, position: i64) {
        if self.map.insert(ch, position).is_none() {
            self.order.push(ch);
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Entries in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&Channel, i64)> + '_ {
        self.order.iter().map(move |c| (c, self.map[c]))
    }

    /// Remove every entry whose channel matches; the removed channels in order.
    pub fn remove_where(&mut self, mut pred: impl FnMut(&Channel) -> bool) -> Vec<Channel> {
        let mut removed = Vec::new();
        let map = &mut self.map;
        self.order.retain(|c| {
            if pred(c) {
                map.remove(c);
                removed.push(*c);
                false
            } else {
                true
            }
        });
        removed
    }
}

/// A set of channels iterating in insertion order (the engine's dirty marks).
#[derive(Default)]
pub struct OrderedSet {
    seen: FxSet<Channel>,
    order: Vec<Channel>,
}

impl OrderedSet {
    #[inline]
    pub fn add(&mut self, ch: Channel) {
        if self.seen.insert(ch) {
            self.order.push(ch);
        }
    }

    pub fn items(&self) -> &[Channel] {
        &self.order
    }

    pub fn clear(&mut self) {
        self.seen.clear();
        self.order.clear();
    }
}
