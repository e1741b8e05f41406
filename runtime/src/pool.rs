//! A persistent thread pool for task-sliced kernels.
//!
//! A parallel kernel call hands `num_tasks` slices to the pool; the caller
//! works too, and returns when every slice is done. Workers spin briefly on
//! an atomic generation counter between calls (consecutive kernels of one
//! model run arrive microseconds apart) and only then sleep on a condition
//! variable, so a call costs a few hundred nanoseconds, not a thread wake-up.
//!
//! A call's cost is cache-line transfers between cores (~100 ns each), so
//! what the caller writes (the job), each thread's claim on its own slice
//! and the count of completed slices sit on separate lines, and the
//! job is published without a lock: its fields are atomics guarded by the
//! generation counter, seqlock style (odd while the caller writes them). The
//! pool's round trip went 670 → ~300 ns on two Sapphire Rapids cores
//! (`cargo run --release -p kiln-runtime --features std --example pool_overhead`).

use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::PackedKernel;

/// How long an idle worker spins before it sleeps.
const SPIN: Duration = Duration::from_micros(200);

/// Spin iterations between two looks at the clock (reading it costs more
/// than a spin iteration, and a worker should notice a job within one).
const SPINS_PER_CLOCK_READ: u32 = 64;

/// A value on a cache line (pair) of its own: x86 prefetches lines in
/// adjacent pairs, hence 128 bytes.
#[repr(align(128))]
struct Line<T>(T);

#[derive(Clone, Copy)]
struct Job {
    kernel: PackedKernel,
    args: usize,
    num_tasks: i64,
    /// The generation this job was published with.
    generation: u64,
}

/// What the caller publishes; workers only read it.
struct Published {
    /// Even once a job is published, odd while the caller writes one.
    generation: AtomicU64,
    kernel: AtomicUsize,
    args: AtomicUsize,
    num_tasks: AtomicI64,
    shutdown: AtomicBool,
}

impl Published {
    /// The job of generation `g` (read after seeing `g` even), or `None`
    /// when the caller has started writing a newer one meanwhile.
    fn read(&self, g: u64) -> Option<Job> {
        let kernel = self.kernel.load(Ordering::Relaxed);
        let args = self.args.load(Ordering::Relaxed);
        let num_tasks = self.num_tasks.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if self.generation.load(Ordering::Relaxed) != g || kernel == 0 {
            return None;
        }
        // SAFETY: `kernel` was stored from a `PackedKernel` (never 0 after the first job).
        let kernel = unsafe { std::mem::transmute::<usize, PackedKernel>(kernel) };
        Some(Job { kernel, args, num_tasks, generation: g })
    }
}

struct Shared {
    published: Line<Published>,
    /// Per task slice: the generation of the job that last claimed it. Slice
    /// `k` is thread `k`'s own (the caller is thread 0), so its line stays
    /// in that thread's cache from call to call and claiming it costs no
    /// transfer; a thread that finishes early claims others' unclaimed ones
    /// (a worker may be asleep or descheduled).
    claims: Box<[Line<AtomicU64>]>,
    /// Slices finished since the pool started; the caller knows the count
    /// each call must reach, so nothing is reset per call.
    completed: Line<AtomicU64>,
    /// The largest status a slice returned since the caller last looked (0: none failed).
    failure: Line<AtomicI32>,
    /// Workers asleep (or about to be) on `wake`: a call wakes them only
    /// when there are some (a notification is a system call, about a
    /// microsecond, per kernel of a model run otherwise).
    sleeping: Line<AtomicUsize>,
    wake: Condvar,
    sleepers: Mutex<()>,
}

impl Shared {
    /// Run thread `me`'s own slice of `job`, then every slice no thread has claimed yet.
    fn work(&self, job: Job, me: usize) {
        // The job's slices: one per thread the pool has (fewer than the
        // claims where the system refused to start some).
        let n = (job.num_tasks as usize).min(self.claims.len());
        for k in (me..n).chain(0..me.min(n)) {
            let claim = &self.claims[k].0;
            let last = claim.load(Ordering::Acquire);
            // Every claim of this job or a newer one is at least `generation`.
            if last >= job.generation
                || claim.compare_exchange(last, job.generation, Ordering::AcqRel, Ordering::Acquire).is_err()
            {
                continue;
            }
            // SAFETY: `run` keeps `args` alive and valid until every slice has completed.
            let status = unsafe { (job.kernel)(job.args as *const *mut u8, k as i64, job.num_tasks) };
            if status != 0 {
                self.failure.0.fetch_max(status, Ordering::AcqRel);
            }
            self.completed.0.fetch_add(1, Ordering::Release);
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
    /// One job at a time per pool; holds the slices completed so far.
    busy: Mutex<u64>,
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
            published: Line(Published {
                generation: AtomicU64::new(0),
                kernel: AtomicUsize::new(0),
                args: AtomicUsize::new(0),
                num_tasks: AtomicI64::new(0),
                shutdown: AtomicBool::new(false),
            }),
            claims: (0..threads).map(|_| Line(AtomicU64::new(0))).collect(),
            completed: Line(AtomicU64::new(0)),
            failure: Line(AtomicI32::new(0)),
            sleeping: Line(AtomicUsize::new(0)),
            wake: Condvar::new(),
            sleepers: Mutex::new(()),
        });
        let mut pool = ThreadPool { shared, workers: Vec::new(), threads: 1, busy: Mutex::new(0) };
        for k in 1..threads {
            let s = Arc::clone(&pool.shared);
            match std::thread::Builder::new().name(format!("kiln-worker-{k}")).spawn(move || worker(&s, k)) {
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
        let mut completed = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        let p = &s.published.0;
        // Seqlock write: odd while the fields change, so that a worker which
        // read some of them before and some after sees its generation moved.
        let previous = p.generation.load(Ordering::Relaxed);
        p.generation.store(previous + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        p.kernel.store(kernel as usize, Ordering::Relaxed);
        p.args.store(args.as_ptr() as usize, Ordering::Relaxed);
        p.num_tasks.store(n, Ordering::Relaxed);
        let job = Job { kernel, args: args.as_ptr() as usize, num_tasks: n, generation: previous + 2 };
        // SeqCst with the worker's side: either it counts itself asleep before
        // this store (and is woken), or it sees the new generation afterwards.
        p.generation.store(job.generation, Ordering::SeqCst);
        if s.sleeping.0.load(Ordering::SeqCst) > 0 {
            let _l = s.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        s.work(job, 0);
        *completed += n as u64;
        while s.completed.0.load(Ordering::Acquire) != *completed {
            std::hint::spin_loop();
        }
        match s.failure.0.load(Ordering::Acquire) {
            0 => 0,
            _ => s.failure.0.swap(0, Ordering::AcqRel),
        }
    }
}

fn worker(s: &Shared, me: usize) {
    let p = &s.published.0;
    let mut seen = p.generation.load(Ordering::Acquire);
    loop {
        // Spin for a new job, then sleep until woken.
        let start = Instant::now();
        let mut spins = 0u32;
        let job = loop {
            if p.shutdown.load(Ordering::Acquire) {
                return;
            }
            let g = p.generation.load(Ordering::Acquire);
            if g != seen && g % 2 == 0 {
                if let Some(job) = p.read(g) {
                    seen = g;
                    break job;
                }
                continue;
            }
            spins += 1;
            if spins % SPINS_PER_CLOCK_READ != 0 || start.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let guard = s.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            s.sleeping.0.fetch_add(1, Ordering::SeqCst);
            if p.generation.load(Ordering::SeqCst) == seen && !p.shutdown.load(Ordering::Acquire) {
                let _woken = s.wake.wait_timeout(guard, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner());
            }
            s.sleeping.0.fetch_sub(1, Ordering::SeqCst);
        };
        s.work(job, me);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.published.0.shutdown.store(true, Ordering::Release);
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

    static SLICE_SUM: AtomicU64 = AtomicU64::new(0);

    /// Adds `task_id + 1` for each slice.
    unsafe extern "C" fn sum_slices(_: *const *mut u8, task: i64, _: i64) -> i32 {
        SLICE_SUM.fetch_add(task as u64 + 1, Ordering::Relaxed);
        0
    }

    /// More threads than cores (workers descheduled mid-call, slices claimed
    /// by whoever gets there first): every call still runs each slice once,
    /// and returns only when all have run.
    #[test]
    fn oversubscribed_calls_run_every_slice_exactly_once() {
        let pool = ThreadPool::new(8);
        let per_call: u64 = (1..=pool.threads() as u64).sum();
        for call in 1..=5000u64 {
            assert_eq!(unsafe { pool.run(sum_slices, &[]) }, 0);
            assert_eq!(SLICE_SUM.load(Ordering::Relaxed), call * per_call, "after call {call}");
        }
    }
}
