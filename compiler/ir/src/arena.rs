//! Arenas with small typed handles (the storage decision of DESIGN.md).
//!
//! `Arena<T>` appends; a `Handle<T>` is a `u32` index that is `Copy` and costs
//! nothing to compare. `UniqueArena<T>` hash-conses: inserting an equal value
//! twice returns the same handle. `HandleMap` is a side table keyed by handle.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

use indexmap::IndexSet;
use rustc_hash::FxBuildHasher;

/// A typed index into an [`Arena`] or [`UniqueArena`].
pub struct Handle<T> {
    index: u32,
    _marker: PhantomData<fn() -> T>,
}

impl<T> Handle<T> {
    /// The handle of the `index`-th element. Only arenas hand out valid ones.
    pub const fn from_index(index: usize) -> Self {
        Handle { index: index as u32, _marker: PhantomData }
    }

    /// The position of the element in its arena.
    pub const fn index(self) -> usize {
        self.index as usize
    }
}

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Handle<T> {}
impl<T> PartialEq for Handle<T> {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
    }
}
impl<T> Eq for Handle<T> {}
impl<T> PartialOrd for Handle<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Handle<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.index.cmp(&other.index)
    }
}
impl<T> Hash for Handle<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.index.hash(state)
    }
}
impl<T> fmt::Debug for Handle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = std::any::type_name::<T>();
        let short = full.rsplit("::").next().unwrap_or(full);
        write!(f, "{short}#{}", self.index)
    }
}

/// An append-only vector addressed by [`Handle`]s.
#[derive(Clone, Debug)]
pub struct Arena<T> {
    items: Vec<T>,
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Arena { items: Vec::new() }
    }
}

impl<T> Arena<T> {
    /// An empty arena.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `value` and returns its handle, the next index.
    pub fn append(&mut self, value: T) -> Handle<T> {
        let handle = Handle::from_index(self.items.len());
        self.items.push(value);
        handle
    }

    /// How many elements the arena holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the arena holds no element.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The element, or `None` for a handle from another arena.
    pub fn try_get(&self, handle: Handle<T>) -> Option<&T> {
        self.items.get(handle.index())
    }

    /// Every element with its handle, in append order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (Handle<T>, &T)> + ExactSizeIterator {
        self.items.iter().enumerate().map(|(i, v)| (Handle::from_index(i), v))
    }
}

impl<T> std::ops::Index<Handle<T>> for Arena<T> {
    type Output = T;
    fn index(&self, handle: Handle<T>) -> &T {
        &self.items[handle.index()]
    }
}

impl<T> std::ops::IndexMut<Handle<T>> for Arena<T> {
    fn index_mut(&mut self, handle: Handle<T>) -> &mut T {
        &mut self.items[handle.index()]
    }
}

/// A hash-consing arena: equal values share one handle.
#[derive(Clone, Debug)]
pub struct UniqueArena<T> {
    set: IndexSet<T, FxBuildHasher>,
}

impl<T> Default for UniqueArena<T> {
    fn default() -> Self {
        UniqueArena { set: IndexSet::default() }
    }
}

impl<T: Eq + Hash> UniqueArena<T> {
    /// An empty arena.
    pub fn new() -> Self {
        Self::default()
    }

    /// Insert `value`, or return the handle of the equal value already present.
    pub fn insert(&mut self, value: T) -> Handle<T> {
        let (index, _) = self.set.insert_full(value);
        Handle::from_index(index)
    }

    /// The handle of a value equal to `value`, if present.
    pub fn get_handle(&self, value: &T) -> Option<Handle<T>> {
        self.set.get_index_of(value).map(Handle::from_index)
    }

    /// How many distinct values the arena holds.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether the arena holds no value.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Every value with its handle, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (Handle<T>, &T)> {
        self.set.iter().enumerate().map(|(i, v)| (Handle::from_index(i), v))
    }
}

impl<T> std::ops::Index<Handle<T>> for UniqueArena<T> {
    type Output = T;
    fn index(&self, handle: Handle<T>) -> &T {
        &self.set[handle.index()]
    }
}

/// A side table: one optional value per handle of some arena.
#[derive(Clone, Debug)]
pub struct HandleMap<K, V> {
    values: Vec<Option<V>>,
    _marker: PhantomData<fn() -> K>,
}

impl<K, V> Default for HandleMap<K, V> {
    fn default() -> Self {
        HandleMap { values: Vec::new(), _marker: PhantomData }
    }
}

impl<K, V> HandleMap<K, V> {
    /// An empty side table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A table with room for `n` handles, all absent.
    pub fn with_capacity(n: usize) -> Self {
        let mut values = Vec::with_capacity(n);
        values.resize_with(n, || None);
        HandleMap { values, _marker: PhantomData }
    }

    /// Sets the value of `key`, growing the table as needed; returns the previous value.
    pub fn insert(&mut self, key: Handle<K>, value: V) -> Option<V> {
        let i = key.index();
        if i >= self.values.len() {
            self.values.resize_with(i + 1, || None);
        }
        self.values[i].replace(value)
    }

    /// The value of `key`, or `None` when absent.
    pub fn get(&self, key: Handle<K>) -> Option<&V> {
        self.values.get(key.index()).and_then(Option::as_ref)
    }

    /// The value of `key`, mutably, or `None` when absent.
    pub fn get_mut(&mut self, key: Handle<K>) -> Option<&mut V> {
        self.values.get_mut(key.index()).and_then(Option::as_mut)
    }

    /// Whether `key` has a value.
    pub fn contains(&self, key: Handle<K>) -> bool {
        self.get(key).is_some()
    }

    /// Removes the value of `key` and returns it.
    pub fn remove(&mut self, key: Handle<K>) -> Option<V> {
        self.values.get_mut(key.index()).and_then(Option::take)
    }

    /// The present entries, in handle order.
    pub fn iter(&self) -> impl Iterator<Item = (Handle<K>, &V)> {
        self.values.iter().enumerate().filter_map(|(i, v)| v.as_ref().map(|v| (Handle::from_index(i), v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_arena_hash_conses() {
        let mut a = UniqueArena::new();
        let x = a.insert(vec![1, 2]);
        let y = a.insert(vec![3]);
        assert_eq!(a.insert(vec![1, 2]), x);
        assert_ne!(x, y);
        assert_eq!(a.len(), 2);
        assert_eq!(a[y], vec![3]);
    }

    #[test]
    fn handle_map_side_table() {
        let mut arena = Arena::new();
        let a = arena.append("a");
        let b = arena.append("b");
        let mut m = HandleMap::new();
        m.insert(b, 2);
        assert_eq!(m.get(a), None);
        assert_eq!(m.get(b), Some(&2));
        assert_eq!(m.iter().count(), 1);
    }
}
