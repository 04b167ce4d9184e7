//! Transports waiting for their records to become durable, woken precisely.
//!
//! After every group commit the log's writer thread reports the new durable sequence number. Each
//! waiter registered the sequence number it needs, so a commit wakes exactly the waiters it made
//! durable: a record appended while a commit was running is not woken by that commit only to find
//! itself still pending (with a broadcast, about one waiter in five was woken for nothing at
//! 50,000 msg/s). On the runtime, the writer thread wakes one dispatcher task, which wakes the
//! waiters from a runtime worker, where a wake-up is a push onto that worker's own run queue rather
//! than a cross-thread schedule per waiter. The waiters are woken oldest record first, so the PUBACKs of
//! a commit go out in the order their PUBLISHes came in.
//!
//! On Linux the writer rings the dispatcher through an eventfd that the runtime's I/O driver watches
//! (the "doorbell"), not through a task waker. A waker used from outside the runtime puts the task at the
//! back of the runtime's global queue, which busy workers look at only now and then and which holds the
//! overflow of every large wake-up: a probe on a warm server at 50,000 msg/s found the dispatcher 20-60
//! ms late there. A busy worker polls the I/O driver every 61 tasks, and a task the driver wakes goes to
//! that worker's own queue, at its front when it is the last woken.
//!
//! When the log is poisoned it reports the unchanged sequence number, and every waiter is woken to
//! see it; when the log goes away (the listener is dropped) every waiter is woken to see that.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Why a wait ended without its record being durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// The log reported a commit with no progress: it is poisoned (the caller checks the log).
    Stalled,
    /// The log is gone.
    Gone,
}

#[derive(Default)]
pub(crate) struct DurableWaiters {
    /// Last durable sequence number the log reported.
    durable: AtomicU64,
    /// Bumped when the log reports no progress (poisoning), so that waiters re-check the log.
    stalls: AtomicU64,
    /// The stall count the last scan saw: a scan that sees a new one wakes every waiter.
    stalls_scanned: AtomicU64,
    /// The log is gone: no commit will come.
    gone: AtomicBool,
    /// Sequence number each waiter needs, and its waker. Sequence numbers are handed out in append order
    /// but registered by several threads, so this is only nearly sorted; a commit scans it whole (it holds
    /// about one entry per connection with records in flight).
    waiters: Mutex<Vec<(u64, Waker)>>,
    /// Set once a dispatcher task runs: the writer thread then wakes only it.
    dispatched: AtomicBool,
    commits: Notify,
    /// Commits reported, and how many of them the last scan of `waiters` had seen when it started: while the
    /// dispatcher lags by two or more, connections scan in its place (see [`DurableWaiters::help`]).
    reported: AtomicU64,
    scanned: AtomicU64,
    /// Held by whoever helps, so that the connections that find the dispatcher late do not all scan.
    helping: AtomicBool,
    /// When the first commit not yet scanned for was reported ([`now_ns`]; 0: none), for
    /// `fleetwire_ingest_wake_delay_seconds`.
    pending_since: AtomicU64,
    /// The doorbell's writing end, and whether the dispatcher listens on it (else it waits on `commits`).
    doorbell: OnceLock<doorbell::Bell>,
    ringing: AtomicBool,
}

/// Nanoseconds on a monotonic clock, never 0.
fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let elapsed = BASE.get_or_init(Instant::now).elapsed().as_nanos();
    u64::try_from(elapsed).unwrap_or(u64::MAX - 1) + 1
}

impl DurableWaiters {
    /// The last durable sequence number reported.
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Called by the log's writer thread after every commit (and, unchanged, when the log is poisoned).
    fn published(&self, seq: u64) {
        // Only the first unscanned commit's time is kept: a scan covers every commit before it.
        let _ =
            self.pending_since
                .compare_exchange(0, now_ns(), Ordering::AcqRel, Ordering::Relaxed);
        self.reported.fetch_add(1, Ordering::AcqRel);
        let previous = self.durable.fetch_max(seq, Ordering::AcqRel);
        if seq <= previous {
            self.stalls.fetch_add(1, Ordering::AcqRel);
        }
        self.wake();
    }

    /// The log and its listener are gone.
    fn close(&self) {
        self.gone.store(true, Ordering::Release);
        self.wake();
    }

    fn wake(&self) {
        if self.dispatched.load(Ordering::Acquire) {
            let rung = self.ringing.load(Ordering::Acquire)
                && self.doorbell.get().is_some_and(|bell| bell.ring().is_ok());
            if !rung {
                self.commits.notify_one();
            }
        } else {
            self.wake_due(&mut Vec::new(), false);
        }
    }

    /// Wakes every waiter whose sequence number is durable, or all of them after a stall or once the log is
    /// gone, oldest record first (see `wake_in_order`). `woken` is a reusable buffer.
    fn wake_due(&self, woken: &mut Vec<(u64, Waker)>, on_runtime: bool) {
        // Before the durable number: a commit reported after this load is left to the next scan.
        self.scanned
            .fetch_max(self.reported.load(Ordering::Acquire), Ordering::AcqRel);
        let since = self.pending_since.swap(0, Ordering::AcqRel);
        if since != 0 {
            crate::metrics::wake_delay(now_ns().saturating_sub(since) / 1_000);
        }
        let durable = self.durable();
        let stalls = self.stalls.load(Ordering::Acquire);
        let all = self.stalls_scanned.swap(stalls, Ordering::AcqRel) != stalls
            || self.gone.load(Ordering::Acquire);
        woken.extend(
            self.waiters
                .lock()
                .extract_if(.., |(seq, _)| all || *seq <= durable),
        );
        wake_in_order(woken, on_runtime);
    }

    /// The dispatcher: wakes the due waiters after each commit, from the runtime, until the log is gone.
    /// With `doorbell` it listens on one where the platform has them; the runtime then needs its I/O
    /// driver (registering with a runtime without one panics).
    pub async fn dispatch(self: Arc<Self>, doorbell: bool) {
        /// If the task is dropped (its runtime shuts down), the writer thread wakes waiters itself again.
        struct Dispatching<'a>(&'a DurableWaiters);
        impl Drop for Dispatching<'_> {
            fn drop(&mut self) {
                self.0.dispatched.store(false, Ordering::Release);
                self.0.ringing.store(false, Ordering::Release);
                self.0.wake_due(&mut Vec::new(), false);
            }
        }
        // The doorbell, where the platform and the runtime have one (an I/O driver); else `commits`.
        let mut listener = match doorbell.then(doorbell::Bell::pair) {
            // A second dispatcher (there is one per log) keeps to `commits`.
            Some(Ok((bell, listener))) => self.doorbell.set(bell).is_ok().then_some(listener),
            None => None,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "commits wake the dispatcher through a task waker");
                None
            }
        };
        self.ringing.store(listener.is_some(), Ordering::Release);
        self.dispatched.store(true, Ordering::Release);
        let _dispatching = Dispatching(&self);
        let mut woken = Vec::new();
        // A commit reported before `dispatched` was set woke directly; one reported between the store and
        // the first wait rang the doorbell (registered with the driver before) or left a permit in
        // `commits`, so nothing is missed.
        loop {
            match listener.as_ref() {
                Some(bell) => {
                    if let Err(e) = bell.rung().await {
                        // Commits notify `commits` from now on; the scan below covers those that rang.
                        tracing::warn!(error = %e, "the dispatcher's doorbell failed");
                        self.ringing.store(false, Ordering::Release);
                        listener = None;
                    }
                }
                None => self.commits.notified().await,
            }
            self.wake_due(&mut woken, true);
            if self.gone.load(Ordering::Acquire) {
                return;
            }
        }
    }

    /// Scans for due waiters from a connection's task when the dispatcher has not yet run for the last two
    /// commits or more. Woken through a task waker from outside the runtime (without a doorbell), the
    /// dispatcher waits in the runtime's global queue, which busy workers look at only now and then: behind
    /// a large batch of woken connections it waited up to 20-60 ms (a probe on a warm server at 50,000
    /// msg/s), and no commit meanwhile woke anyone; rung, it still waits for a busy worker to poll the I/O
    /// driver and then behind what that worker has queued. The connections keep running all the same: the
    /// first that waits for its own record does the scan, and its wake-ups go onto its worker's own queue
    /// as the dispatcher's would.
    pub fn help(&self) {
        if !self.dispatched.load(Ordering::Acquire)
            || self.reported.load(Ordering::Acquire) < self.scanned.load(Ordering::Acquire) + 2
            || self.helping.swap(true, Ordering::Acquire)
        {
            return;
        }
        HELP_BUFFER.with_borrow_mut(|woken| self.wake_due(woken, true));
        self.helping.store(false, Ordering::Release);
    }

    /// Ready with `Ok` once `seq` is durable; `Err` when woken by a stall (the caller checks whether the log
    /// is poisoned and waits again if not) or once the log is gone. `stalls` is the stall count the wait
    /// started with.
    pub fn poll_durable(
        &self,
        seq: u64,
        stalls: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Closed>> {
        self.help();
        if let Some(done) = self.settled(seq, stalls) {
            return Poll::Ready(done);
        }
        self.waiters.lock().push((seq, cx.waker().clone()));
        // A commit that came between the check above and the registration may have scanned the list
        // before this entry was in it. (The entry stays until a later scan removes it; a spare wake-up.)
        match self.settled(seq, stalls) {
            Some(done) => Poll::Ready(done),
            None => Poll::Pending,
        }
    }

    fn settled(&self, seq: u64, stalls: u64) -> Option<Result<(), Closed>> {
        if self.durable() >= seq {
            Some(Ok(()))
        } else if self.gone.load(Ordering::Acquire) {
            Some(Err(Closed::Gone))
        } else if self.stalls.load(Ordering::Acquire) != stalls {
            Some(Err(Closed::Stalled))
        } else {
            None
        }
    }

    /// The stall count, to start a wait with.
    pub fn stalls(&self) -> u64 {
        self.stalls.load(Ordering::Acquire)
    }
}

thread_local! {
    /// The wake-ups of a scan a connection does in the dispatcher's place.
    static HELP_BUFFER: std::cell::RefCell<Vec<(u64, Waker)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Wakes `woken` (drained) so that the connections run in the order of their records, the oldest first.
///
/// A commit covers the records of about a millisecond; its PUBACKs then go out one connection at a time.
/// The connection whose record came first has waited longest, so it answers first: the batch's worst
/// latency is then its oldest record's wait, not that wait plus everyone else's socket write. Waiters
/// register in nearly the order of their sequence numbers (several threads append), so a stable sort is
/// about one pass. On a runtime worker, tokio runs the task woken last first (its LIFO slot) and the
/// others in the order woken, so there the oldest is woken last; elsewhere a wake is a push onto a FIFO
/// queue.
fn wake_in_order(woken: &mut Vec<(u64, Waker)>, on_runtime: bool) {
    woken.sort_by_key(|(seq, _)| *seq);
    if on_runtime && !woken.is_empty() {
        woken.rotate_left(1);
    }
    for (_, waker) in woken.drain(..) {
        waker.wake();
    }
}

/// The dispatcher's doorbell: an eventfd the writer thread writes and the runtime's I/O driver watches.
mod doorbell {
    use std::io;

    #[cfg(target_os = "linux")]
    pub(super) struct Bell(std::os::fd::OwnedFd);

    #[cfg(target_os = "linux")]
    pub(super) struct Listener(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>);

    #[cfg(target_os = "linux")]
    impl Bell {
        /// A bell and its listener, registered with the current runtime's I/O driver (an error outside a
        /// runtime, or in one without I/O).
        pub fn pair() -> io::Result<(Bell, Listener)> {
            use rustix::event::{eventfd, EventfdFlags};
            let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
            let listening = rustix::io::dup(&fd)?;
            // SAFETY: the `AsyncFd` owns the `OwnedFd`, which stays open, as the same descriptor, until the
            // `AsyncFd` (and its registration) is dropped.
            let listener = unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(
                    listening,
                    tokio::io::Interest::READABLE,
                )
            }
            .map_err(io::Error::from)?;
            Ok((Bell(fd), Listener(listener)))
        }

        /// Rings: the listener's next (or current) wait ends. Never blocks.
        pub fn ring(&self) -> io::Result<()> {
            rustix::io::write(&self.0, &1u64.to_ne_bytes())?;
            Ok(())
        }
    }

    #[cfg(target_os = "linux")]
    impl Listener {
        /// Ready once the bell has rung since the last wait (however many times).
        pub async fn rung(&self) -> io::Result<()> {
            loop {
                let mut guard = self.0.readable().await?;
                let mut count = [0u8; 8];
                // Reading takes every ring so far; one that comes after it is a new edge for the driver.
                match rustix::io::read(self.0.get_ref(), &mut count) {
                    Ok(_) => {
                        guard.clear_ready();
                        return Ok(());
                    }
                    Err(rustix::io::Errno::AGAIN) => guard.clear_ready(),
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) struct Bell;

    #[cfg(not(target_os = "linux"))]
    pub(super) struct Listener;

    #[cfg(not(target_os = "linux"))]
    impl Bell {
        pub fn pair() -> io::Result<(Bell, Listener)> {
            Err(io::Error::new(io::ErrorKind::Unsupported, "no eventfd"))
        }

        pub fn ring(&self) -> io::Result<()> {
            Err(io::Error::new(io::ErrorKind::Unsupported, "no eventfd"))
        }
    }

    #[cfg(not(target_os = "linux"))]
    impl Listener {
        pub async fn rung(&self) -> io::Result<()> {
            Err(io::Error::new(io::ErrorKind::Unsupported, "no eventfd"))
        }
    }
}

/// Owned by the log's commit listener: reports commits, and closes the waiters when the listener (and with
/// it the log) is dropped.
pub(crate) struct Publisher(pub Arc<DurableWaiters>);

impl Publisher {
    pub fn published(&self, seq: u64) {
        self.0.published(seq);
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn wait(waiters: &DurableWaiters, seq: u64) -> Result<(), Closed> {
        let stalls = waiters.stalls();
        std::future::poll_fn(|cx| waiters.poll_durable(seq, stalls, cx)).await
    }

    /// `dispatched`: `None` without a dispatcher, else whether it listens on a doorbell.
    async fn waits_wake_exactly_when_durable(dispatched: Option<bool>) {
        let waiters = Arc::new(DurableWaiters::default());
        let publisher = Publisher(waiters.clone());
        if let Some(doorbell) = dispatched {
            tokio::spawn(waiters.clone().dispatch(doorbell));
            while !waiters.dispatched.load(Ordering::Acquire) {
                tokio::task::yield_now().await;
            }
            assert_eq!(
                waiters.ringing.load(Ordering::Acquire),
                doorbell && cfg!(target_os = "linux")
            );
        }
        let tasks: Vec<_> = (1..=5u64)
            .map(|seq| {
                let waiters = waiters.clone();
                tokio::spawn(async move { wait(&waiters, seq * 10).await })
            })
            .collect();
        while waiters.waiters.lock().len() < 5 {
            tokio::task::yield_now().await;
        }
        publisher.published(25);
        // 10 and 20 finish, 30, 40 and 50 stay registered.
        for task in &tasks[..2] {
            while !task.is_finished() {
                tokio::task::yield_now().await;
            }
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(tasks[2..].iter().all(|t| !t.is_finished()));
        assert_eq!(waiters.waiters.lock().len(), 3);
        publisher.published(40);
        drop(publisher); // the log goes away: 50 learns it
        let results: Vec<_> = futures_join(tasks).await;
        assert_eq!(
            results,
            vec![Ok(()), Ok(()), Ok(()), Ok(()), Err(Closed::Gone)]
        );
        assert!(waiters.waiters.lock().is_empty());
    }

    async fn futures_join(
        tasks: Vec<tokio::task::JoinHandle<Result<(), Closed>>>,
    ) -> Vec<Result<(), Closed>> {
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.expect("waiter task"));
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_are_woken_by_the_dispatcher_when_their_record_is_durable() {
        waits_wake_exactly_when_durable(Some(true)).await;
    }

    #[test]
    fn a_dispatcher_without_a_doorbell_is_woken_through_its_waker() {
        // No I/O driver: the one thing a dispatcher without a doorbell needs is the runtime.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("runtime");
        runtime.block_on(waits_wake_exactly_when_durable(Some(false)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_dispatcher_times_its_scans() {
        let before = crate::metrics::counters()
            .wake_delays
            .counts
            .iter()
            .sum::<u64>();
        waits_wake_exactly_when_durable(Some(true)).await;
        // At least the two commits of that test were scanned for, each scan timed.
        let after = crate::metrics::counters()
            .wake_delays
            .counts
            .iter()
            .sum::<u64>();
        assert!(after >= before + 2, "{before} -> {after}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_are_woken_directly_without_a_dispatcher() {
        waits_wake_exactly_when_durable(None).await;
    }

    /// Registers waits for 30, 10 and 20 (in that order), makes them all durable with one commit, and
    /// returns the order in which the waiting tasks ran on.
    async fn order_of_answers(dispatched: bool) -> Vec<u64> {
        let waiters = Arc::new(DurableWaiters::default());
        let publisher = Publisher(waiters.clone());
        if dispatched {
            tokio::spawn(waiters.clone().dispatch(true));
            while !waiters.dispatched.load(Ordering::Acquire) {
                tokio::task::yield_now().await;
            }
        }
        let ran = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for seq in [30u64, 10, 20] {
            let mine = waiters.clone();
            let ran = ran.clone();
            tasks.push(tokio::spawn(async move {
                let done = wait(&mine, seq).await;
                ran.lock().push(seq);
                done
            }));
            // Each registers before the next is spawned.
            while waiters.waiters.lock().len() < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        publisher.published(30);
        for task in tasks {
            assert_eq!(task.await.expect("waiter task"), Ok(()));
        }
        let ran = ran.lock().clone();
        ran
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_dispatcher_answers_the_oldest_record_first() {
        assert_eq!(order_of_answers(true).await, vec![10, 20, 30]);
    }

    #[tokio::test]
    async fn direct_wakes_answer_the_oldest_record_first() {
        assert_eq!(order_of_answers(false).await, vec![10, 20, 30]);
    }

    #[tokio::test]
    async fn a_commit_without_progress_wakes_every_waiter_to_check_the_log() {
        let waiters = Arc::new(DurableWaiters::default());
        let publisher = Publisher(waiters.clone());
        publisher.published(5);
        let task = {
            let waiters = waiters.clone();
            tokio::spawn(async move { wait(&waiters, 9).await })
        };
        tokio::task::yield_now().await;
        publisher.published(5);
        assert_eq!(task.await.expect("waiter task"), Err(Closed::Stalled));
        // A wait that starts after the stall is not ended by it.
        assert_eq!(wait(&waiters, 3).await, Ok(()));
        let later = {
            let waiters = waiters.clone();
            tokio::spawn(async move { wait(&waiters, 9).await })
        };
        tokio::task::yield_now().await;
        assert!(!later.is_finished());
        publisher.published(9);
        assert_eq!(later.await.expect("waiter task"), Ok(()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_connection_scans_in_place_of_a_dispatcher_two_commits_late() {
        let waiters = Arc::new(DurableWaiters::default());
        let publisher = Publisher(waiters.clone());
        // A dispatcher that never gets to run: commits only notify it.
        waiters.dispatched.store(true, Ordering::Release);
        let spawn_wait = |seq: u64| {
            let waiters = waiters.clone();
            tokio::spawn(async move { wait(&waiters, seq).await })
        };
        let registered = |n: usize| {
            let waiters = waiters.clone();
            async move {
                while waiters.waiters.lock().len() < n {
                    tokio::task::yield_now().await;
                }
            }
        };
        let first = spawn_wait(10);
        registered(1).await;
        publisher.published(10);
        // One commit unscanned: the next wait leaves it to the dispatcher.
        let second = spawn_wait(20);
        registered(2).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!first.is_finished());
        // Two: the next wait scans, and wakes the first.
        publisher.published(15);
        let third = spawn_wait(30);
        let first = tokio::time::timeout(std::time::Duration::from_secs(10), first)
            .await
            .expect("the first wait was not woken by the scan");
        assert_eq!(first.expect("waiter task"), Ok(()));
        registered(2).await;
        assert!(!second.is_finished() && !third.is_finished());
        // Without a dispatcher the writer wakes the rest itself.
        waiters.dispatched.store(false, Ordering::Release);
        publisher.published(30);
        assert_eq!(second.await.expect("waiter task"), Ok(()));
        assert_eq!(third.await.expect("waiter task"), Ok(()));
    }
}
