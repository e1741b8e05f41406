//! Work spread over the machine's cores with scoped threads (compile-time
//! work only: the runtime has its own pool).

/// `f` of each item, in order, computed on up to `threads` threads: each takes
/// the next item from a shared counter, so items sorted largest first end
/// with short ones. (None only where a thread did not get to an item, which
/// scoped threads rule out.)
pub(crate) fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<Option<R>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let threads = threads.min(items.len());
    if threads <= 1 {
        return items.iter().map(|item| Some(f(item))).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(k) else { break };
                let value = f(item);
                *slots[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
            });
        }
    });
    slots.into_iter().map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner())).collect()
}

/// The machine's cores (1 where it cannot say).
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
