//! The registry of connected device sessions: one session per device, as ThingsBoard allows
//! (`ACTORS_MAX_CONCURRENT_SESSION_PER_DEVICE = 1`). A new connection evicts the old one; deleting a device
//! or changing its credentials closes its session.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;

use atomic_waker::AtomicWaker;

use bytes::Bytes;
use parking_lot::Mutex;
use uuid::Uuid;

use crate::ingest::events::{Interest, Subscriber, Update};
use crate::rpc::{RpcRequest, RpcSink, SinkId};

/// Why the server closes a session, as an MQTT 5 reason code (3.x connections are simply closed).
pub mod close_reason {
    /// Another connection authenticated as the same device.
    pub const SESSION_TAKEN_OVER: u8 = 0x8E;
    /// The device was deleted or its credentials changed.
    pub const ADMINISTRATIVE_ACTION: u8 = 0x98;
    /// The device let its updates pile up (it does not read).
    pub const QUOTA_EXCEEDED: u8 = 0x97;
}

/// The signal a connection task waits on between batches: it must close, or its [`Outbox`] has updates.
///
/// Only the connection's own task waits on it, one wait at a time, so it is one waker slot and a flag
/// rather than a `Notify` with its waiter list: the connection starts a wait for every packet it reads,
/// and registering in a waker slot costs an atomic swap where a `Notify` takes its lock twice.
#[derive(Default)]
pub struct CloseSignal {
    waker: AtomicWaker,
    /// A close or wake the connection has not seen yet (kept, like `Notify::notify_one`'s permit, when it
    /// is not waiting).
    pending: AtomicBool,
    reason: AtomicU8,
}

impl CloseSignal {
    pub fn close(&self, reason: u8) {
        self.reason.store(reason, Ordering::Release);
        self.signal();
    }

    /// Wakes the connection without closing it (its outbox has something).
    pub fn wake(&self) {
        self.signal();
    }

    fn signal(&self) {
        self.pending.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Resolves once [`CloseSignal::close`] or [`CloseSignal::wake`] was called: `Some(reason)` when the
    /// connection must close, `None` when it was only woken. A signal is consumed only when this resolves:
    /// a wait dropped before that leaves it for the next one.
    pub async fn signaled(&self) -> Option<u8> {
        std::future::poll_fn(|cx| {
            if self.take_pending() {
                return Poll::Ready(());
            }
            self.waker.register(cx.waker());
            // A signal between the check and the registration found no waker to wake.
            if self.take_pending() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        self.reason()
    }

    /// [`CloseSignal::signaled`] without waiting: `Some` (and the signal consumed) if there is one.
    pub fn try_signaled(&self) -> Option<Option<u8>> {
        self.take_pending().then(|| self.reason())
    }

    fn reason(&self) -> Option<u8> {
        match self.reason.load(Ordering::Acquire) {
            0 => None,
            reason => Some(reason),
        }
    }

    /// Starts loading the signal into the cache. With thousands of connections it is cold by the time its
    /// connection checks it again, and that check waited on memory (measured: 78% of the wait loop's own
    /// samples, on the first read of `pending`); the connection issues this before a system call, which
    /// hides the load.
    pub fn prefetch(&self) {
        fleetwire_model::hint::prefetch_object(self);
    }

    /// Consumes a pending signal. The connection checks for one between every two reads and there almost
    /// never is one: a plain load answers that without a locked instruction or taking the line for writing.
    fn take_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire) && self.pending.swap(false, Ordering::AcqRel)
    }

    /// Resolves with the close reason once [`CloseSignal::close`] was called.
    pub async fn closed(&self) -> u8 {
        loop {
            if let Some(reason) = self.signaled().await {
                return reason;
            }
        }
    }
}

/// Most updates a session's outbox holds before the session is closed as too slow: a device that stops
/// reading must not make the server hold its updates without bound.
pub const OUTBOX_UPDATES_MAX: usize = 1024;

/// Updates waiting to be published to one MQTT session (SHARED attribute pushes), allocated only once the
/// device subscribes to them.
pub struct Outbox {
    signal: Arc<CloseSignal>,
    queue: Mutex<VecDeque<Update>>,
}

impl Outbox {
    pub fn new(signal: Arc<CloseSignal>) -> Outbox {
        Outbox {
            signal,
            queue: Mutex::new(VecDeque::new()),
        }
    }

    /// Takes up to `n` of the oldest updates queued.
    pub fn drain_up_to(&self, n: usize) -> Vec<Update> {
        let mut queue = self.queue.lock();
        let n = n.min(queue.len());
        queue.drain(..n).collect()
    }
}

impl Subscriber for Outbox {
    fn interest(&self) -> Interest {
        Interest::SHARED_PUSH
    }

    fn deliver(&self, update: &Update) -> bool {
        let mut queue = self.queue.lock();
        if queue.len() >= OUTBOX_UPDATES_MAX {
            drop(queue);
            tracing::debug!("a session's outbox overflowed; closing it");
            crate::metrics::refused(
                crate::metrics::Transport::Mqtt,
                crate::metrics::Reason::Quota,
            );
            self.signal.close(close_reason::QUOTA_EXCEEDED);
            return false;
        }
        queue.push_back(update.clone());
        drop(queue);
        self.signal.wake();
        true
    }
}

/// Most server-side RPC requests a session holds undelivered; more wait in the device's RPC queue until it
/// has written these.
pub const RPC_OUTBOX_MAX: usize = 64;

/// Most client-side RPC requests of one session that may wait for a webhook at once.
pub const FORWARDS_MAX: usize = 16;

/// What waits to be published to one MQTT session besides SHARED attribute updates: server-side RPC requests
/// (while the session subscribes to them) and replies to its client-side RPC requests that came late (from a
/// profile's webhook). Allocated on first use.
pub struct RpcOutbox {
    signal: Arc<CloseSignal>,
    queue: Mutex<VecDeque<RpcRequest>>,
    replies: Mutex<Vec<(String, Bytes)>>,
    /// (packet id, request id) of published requests awaiting their PUBACK.
    in_flight: Mutex<Vec<(u16, i32)>>,
    /// Client-side RPC requests of this session being answered by a webhook.
    forwards: AtomicUsize,
    /// Its registration with [`crate::rpc::Rpcs`], while the session subscribes to requests.
    pub sink: Mutex<Option<SinkId>>,
}

impl RpcOutbox {
    pub fn new(signal: Arc<CloseSignal>) -> RpcOutbox {
        RpcOutbox {
            signal,
            queue: Mutex::new(VecDeque::new()),
            replies: Mutex::new(Vec::new()),
            in_flight: Mutex::new(Vec::new()),
            forwards: AtomicUsize::new(0),
            sink: Mutex::new(None),
        }
    }

    /// Takes at most `n` of the queued requests, oldest first.
    pub fn drain_up_to(&self, n: usize) -> Vec<RpcRequest> {
        let mut queue = self.queue.lock();
        let n = n.min(queue.len());
        queue.drain(..n).collect()
    }

    /// Queues a reply to publish on `topic` and wakes the session. At most [`RPC_OUTBOX_MAX`] wait; more
    /// are dropped (a device that floods requests and never reads gets no more answers).
    pub fn reply(&self, topic: String, body: Bytes) {
        let mut replies = self.replies.lock();
        if replies.len() >= RPC_OUTBOX_MAX {
            tracing::debug!("a session's late RPC replies overflowed; dropping one");
            return;
        }
        replies.push((topic, body));
        drop(replies);
        self.signal.wake();
    }

    /// Counts one more client-side RPC request being answered elsewhere; false (and nothing counted) when
    /// [`FORWARDS_MAX`] already are, so a device cannot make the server hold unbounded work.
    pub fn start_forward(&self) -> bool {
        self.forwards
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < FORWARDS_MAX).then_some(n + 1)
            })
            .is_ok()
    }

    /// One forwarded request was answered.
    pub fn end_forward(&self) {
        self.forwards.fetch_sub(1, Ordering::AcqRel);
    }

    /// Remembers that request `id` went out as packet `pkid`.
    pub fn sent(&self, pkid: u16, id: i32) {
        let mut in_flight = self.in_flight.lock();
        // Bounded like the queue: a device that never acknowledges does not grow it.
        if in_flight.len() >= RPC_OUTBOX_MAX {
            in_flight.remove(0);
        }
        in_flight.push((pkid, id));
    }

    /// The request that packet `pkid` carried, if it was one.
    pub fn acked(&self, pkid: u16) -> Option<i32> {
        let mut in_flight = self.in_flight.lock();
        let index = in_flight.iter().position(|(p, _)| *p == pkid)?;
        Some(in_flight.remove(index).1)
    }

    /// Takes the queued replies.
    pub fn drain_replies_up_to(&self, n: usize) -> Vec<(String, Bytes)> {
        let mut replies = self.replies.lock();
        let n = n.min(replies.len());
        replies.drain(..n).collect()
    }
}

impl RpcSink for RpcOutbox {
    fn deliver(&self, request: &RpcRequest) -> bool {
        let mut queue = self.queue.lock();
        if queue.len() >= RPC_OUTBOX_MAX {
            return false;
        }
        queue.push_back(request.clone());
        drop(queue);
        self.signal.wake();
        crate::metrics::sent(
            crate::metrics::OutTransport::Mqtt,
            crate::metrics::Out::RpcRequest,
            0,
        );
        true
    }

    fn is_one_shot(&self) -> bool {
        false
    }
}

struct Entry {
    session: u64,
    signal: Arc<CloseSignal>,
}

#[derive(Default)]
pub struct Sessions {
    by_device: Mutex<HashMap<Uuid, Entry>>,
    next_session: AtomicU64,
    /// Open MQTT connections, authenticated or not.
    connections: AtomicUsize,
}

/// Counts one open connection for as long as it lives.
pub struct ConnectionGuard<'a>(&'a Sessions);

impl Drop for ConnectionGuard<'_> {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Deregisters the session when the connection ends, unless a newer session already replaced it.
pub struct SessionGuard<'a> {
    sessions: &'a Sessions,
    device: Uuid,
    session: u64,
    pub signal: Arc<CloseSignal>,
}

impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        let mut map = self.sessions.by_device.lock();
        if map
            .get(&self.device)
            .is_some_and(|e| e.session == self.session)
        {
            map.remove(&self.device);
        }
    }
}

impl Sessions {
    /// Registers a new session for `device`, evicting the previous one.
    pub fn register(&self, device: Uuid) -> SessionGuard<'_> {
        let session = self.next_session.fetch_add(1, Ordering::Relaxed);
        let signal = Arc::new(CloseSignal::default());
        let previous = self.by_device.lock().insert(
            device,
            Entry {
                session,
                signal: signal.clone(),
            },
        );
        if let Some(previous) = previous {
            previous.signal.close(close_reason::SESSION_TAKEN_OVER);
        }
        SessionGuard {
            sessions: self,
            device,
            session,
            signal,
        }
    }

    /// Closes the session of `device`, if it has one.
    pub fn close_device(&self, device: Uuid, reason: u8) {
        if let Some(entry) = self.by_device.lock().get(&device) {
            entry.signal.close(reason);
        }
    }

    /// Counts a newly accepted connection until the guard drops.
    pub fn connection_opened(&self) -> ConnectionGuard<'_> {
        self.connections.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(self)
    }

    pub fn connection_count(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.by_device.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn new_session_evicts_old() {
        let sessions = Sessions::default();
        let device = Uuid::new_v4();
        let first = sessions.register(device);
        let second = sessions.register(device);
        assert_eq!(
            first.signal.closed().await,
            close_reason::SESSION_TAKEN_OVER
        );
        drop(first);
        // The old guard must not remove the new session.
        assert_eq!(sessions.len(), 1);
        sessions.close_device(device, close_reason::ADMINISTRATIVE_ACTION);
        assert_eq!(
            second.signal.closed().await,
            close_reason::ADMINISTRATIVE_ACTION
        );
        drop(second);
        assert!(sessions.is_empty());
    }
}
