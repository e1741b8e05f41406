//! A persistent thread pool for task-sliced kernels.
//!
//! A parallel kernel call hands `num_tasks` slices to the pool; the caller
//! works too, and returns when every slice is done. Workers spin briefly on
//! an atomic generation counter between calls (consecutive kernels of one
//! model run arrive microseconds apart) and only then sleep on a condition
//! variable, so a call costs a few microseconds, not a thread wake-up.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::PackedKernel;

/// How long an idle worker spins before it sleeps.
const SPIN: Duration = Duration::from_micros(200);

#[derive(Clone, Copy)]
struct Job {
    kernel: PackedKernel,
    args: usize,
    num_tasks: i64,
    /// The low 32 bits of the generation this job was published with.
    generation: u64,
}

struct Shared {
    generation: AtomicU64,
    job: Mutex<Option<Job>>,
    wake: Condvar,
    sleepers: Mutex<()>,
    /// Workers asleep (or about to be) on `wake`: a call wakes them only
    /// when there are some (a notification is a system call, about a
    /// microsecond, per kernel of a model run otherwise).
    sleeping: AtomicUsize,
    /// `generation << 32 | next task index`: a worker still busy with an old
    /// job cannot claim a slice of a newer one.
    ticket: AtomicU64,
    remaining: AtomicUsize,
    /// The largest status a slice of the current job returned (0: all succeeded).
    status: AtomicI32,
    shutdown: AtomicBool,
}

impl Shared {
    /// Take task slices of `job` until none is left.
    fn work(&self, job: Job) {
        loop {
            let ticket = self.ticket.load(Ordering::Acquire);
            let t = (ticket & 0xFFFF_FFFF) as i64;
            if ticket >> 32 != job.generation || t >= job.num_tasks {
                break;
            }
            if self.ticket.compare_exchange(ticket, ticket + 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            // SAFETY: `run` keeps `args` alive and valid until `remaining` reaches zero.
            let status = unsafe { (job.kernel)(job.args as *const *mut u8, t, job.num_tasks) };
            if status != 0 {
                self.status.fetch_max(status, Ordering::AcqRel);
            }
            self.remaining.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A fixed set of worker threads that run the slices of parallel kernels.
///
/// A kernel with kiln's ABI gets `task_id` and `num_tasks` and does its
/// share; [`ThreadPool::run`] calls it once per thread and waits:
///
/// ```
/// use std::sync::atomic::{AtomicI64, Ordering};
///
/// static SUM: AtomicI64 = AtomicI64::new(0);
/// /// Adds task_id + 1 for each slice: 1 + 2 + 3 + 4 with four threads.
/// unsafe extern "C" fn kernel(_args: *const *mut u8, task_id: i64, _num_tasks: i64) -> i32 {
///     SUM.fetch_add(task_id + 1, Ordering::SeqCst);
///     0
/// }
///
/// let pool = kiln_runtime::ThreadPool::new(4);
/// // SAFETY: the kernel reads no arguments.
/// let status = unsafe { pool.run(kernel, &[]) };
/// assert_eq!((status, SUM.load(Ordering::SeqCst)), (0, 10));
/// ```
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
    busy: Mutex<()>,
}

impl core::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ThreadPool").field("threads", &self.threads).finish()
    }
}

impl ThreadPool {
    /// A pool of `threads` threads in all (the caller counts as one). If the
    /// system cannot start that many, the pool keeps the ones it started
    /// ([`ThreadPool::threads`] says how many) rather than panic; use
    /// [`ThreadPool::try_new`] to get the error instead.
    pub fn new(threads: usize) -> ThreadPool {
        Self::start(threads).unwrap_or_else(|(pool, _)| pool)
    }

    /// A pool of exactly `threads` threads, or the error that stopped the
    /// system from starting one of them.
    pub fn try_new(threads: usize) -> std::io::Result<ThreadPool> {
        Self::start(threads).map_err(|(_, e)| e)
    }

    /// The pool, or the pool of the threads started before one failed, with the error.
    fn start(threads: usize) -> Result<ThreadPool, (ThreadPool, std::io::Error)> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            wake: Condvar::new(),
            sleepers: Mutex::new(()),
            sleeping: AtomicUsize::new(0),
            ticket: AtomicU64::new(0),
            remaining: AtomicUsize::new(0),
            status: AtomicI32::new(0),
            shutdown: AtomicBool::new(false),
        });
        let mut pool = ThreadPool { shared, workers: Vec::new(), threads: 1, busy: Mutex::new(()) };
        for k in 1..threads {
            let s = Arc::clone(&pool.shared);
            match std::thread::Builder::new().name(format!("kiln-worker-{k}")).spawn(move || worker(&s)) {
                Ok(w) => {
                    pool.workers.push(w);
                    pool.threads += 1;
                }
                Err(e) => return Err((pool, e)),
            }
        }
        Ok(pool)
    }

    /// One thread per available core.
    pub fn with_available_parallelism() -> ThreadPool {
        ThreadPool::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Threads the pool runs a kernel on, the caller's included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Run `kernel` as `self.threads()` task slices and wait for all of them;
    /// the kernel's status (0, or the largest a slice returned).
    ///
    /// # Safety
    /// `args` must hold one valid pointer per kernel parameter, as for the kernel itself.
    #[must_use = "a nonzero status is an error the caller must report"]
    pub unsafe fn run(&self, kernel: PackedKernel, args: &[*mut u8]) -> i32 {
        let n = self.threads as i64;
        if n == 1 {
            // SAFETY: forwarded from the caller.
            return unsafe { kernel(args.as_ptr(), 0, 1) };
        }
        // One job at a time per pool.
        let _guard = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let generation = (self.shared.generation.load(Ordering::Acquire) + 1) & 0xFFFF_FFFF;
        let job = Job { kernel, args: args.as_ptr() as usize, num_tasks: n, generation };
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
        self.shared.remaining.store(n as usize, Ordering::Release);
        self.shared.status.store(0, Ordering::Release);
        self.shared.ticket.store(generation << 32, Ordering::Release);
        // SeqCst with the worker's side: either it counts itself asleep before
        // this load (and is woken), or it sees the new generation afterwards.
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        if self.shared.sleeping.load(Ordering::SeqCst) > 0 {
            let _l = self.shared.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        self.shared.work(job);
        while self.shared.remaining.load(Ordering::Acquire) != 0 {
            std::hint::spin_loop();
        }
        self.shared.status.load(Ordering::Acquire)
    }
}

fn worker(s: &Shared) {
    let mut seen = s.generation.load(Ordering::Acquire);
    loop {
        // Spin for a new job, then sleep until woken.
        let start = Instant::now();
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            let g = s.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            if start.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let guard = s.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            s.sleeping.fetch_add(1, Ordering::SeqCst);
            if s.generation.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::Acquire) {
                let _woken = s.wake.wait_timeout(guard, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner());
            }
            s.sleeping.fetch_sub(1, Ordering::SeqCst);
        }
        let job = *s.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(job) = job {
            s.work(job);
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _l = self.shared.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    static HITS: [AtomicU32; 8] = [const { AtomicU32::new(0) }; 8];

    unsafe extern "C" fn count(args: *const *mut u8, task: i64, n: i64) -> i32 {
        assert_eq!(n, 4);
        let _ = args;
        HITS[task as usize].fetch_add(1, Ordering::Relaxed);
        0
    }

    /// Slice 2 of 4 fails with status 7.
    unsafe extern "C" fn third_fails(_: *const *mut u8, task: i64, _: i64) -> i32 {
        if task == 2 {
            7
        } else {
            0
        }
    }

    #[test]
    fn every_task_runs_once_per_call() {
        let pool = ThreadPool::new(4);
        for _ in 0..1000 {
            assert_eq!(unsafe { pool.run(count, &[]) }, 0);
        }
        for h in &HITS[..4] {
            assert_eq!(h.load(Ordering::Relaxed), 1000);
        }
        assert_eq!(HITS[4].load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_failing_slice_fails_the_call_and_only_that_call() {
        let pool = ThreadPool::new(4);
        for _ in 0..100 {
            assert_eq!(unsafe { pool.run(third_fails, &[]) }, 7);
            assert_eq!(unsafe { pool.run(count_ok, &[]) }, 0);
        }
    }

    static ON_WORKER: AtomicU32 = AtomicU32::new(0);

    /// A 2 ms slice, counted when a pool worker (not the caller) runs it.
    unsafe extern "C" fn slow_slice(_: *const *mut u8, _: i64, _: i64) -> i32 {
        std::thread::sleep(Duration::from_millis(2));
        if std::thread::current().name().is_some_and(|n| n.starts_with("kiln-worker")) {
            ON_WORKER.fetch_add(1, Ordering::Relaxed);
        }
        0
    }

    /// Calls far enough apart that the worker sleeps between them: each call
    /// wakes it (the caller alone would take both slices otherwise, and a lost
    /// wake-up would only end at the 50 ms timeout).
    #[test]
    fn a_sleeping_worker_is_woken_for_the_next_call() {
        let pool = ThreadPool::new(2);
        for _ in 0..20 {
            std::thread::sleep(SPIN * 3);
            assert_eq!(unsafe { pool.run(slow_slice, &[]) }, 0);
        }
        let on_worker = ON_WORKER.load(Ordering::Relaxed);
        assert!(on_worker >= 10, "the worker ran {on_worker} of 20 second slices");
    }

    unsafe extern "C" fn count_ok(_: *const *mut u8, _: i64, _: i64) -> i32 {
        0
    }
}
