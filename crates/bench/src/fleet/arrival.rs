//! When a server's answer reached the device's socket, as the kernel saw it (`SO_TIMESTAMPNS`).
//!
//! The generator shares the machine with the server, so the task that reads a PUBACK may run some
//! milliseconds after the PUBACK arrived: it waits for a core, or behind the other devices of its runtime
//! that were woken by the same commit. A device on a machine of its own does not wait for either. The
//! kernel stamps each segment as loopback delivers it (the server's `send`), and `recvmsg` returns the stamp
//! of the last segment it read, so the time from a message being due to that stamp is what a device would
//! see, less the generator's own delay in reading; the report gives it beside the latency that includes it.

use std::io;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// What a read makes room for, at least.
const READ_ROOM: usize = 4096;
/// A stamp older than this is not believed (the realtime clock was set meanwhile): the read's own time is used.
const AGE_MAX: Duration = Duration::from_secs(60);

/// Asks the kernel to stamp what arrives on `stream`. Without it (another platform, or the option refused),
/// reads report no arrival time and the caller counts the read's own time.
pub(super) fn enable(stream: &TcpStream) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let on: libc::c_int = 1;
        // SAFETY: the fd is a live socket owned by `stream`; the option value is a c_int of the given size.
        let rc = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "SO_TIMESTAMPNS not set");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = stream;
}

/// Reads what `stream` has into `buf`: the byte count (0 at end of stream) and when the last of those bytes
/// reached the socket, if the kernel said. Cancel-safe: nothing is read until the socket is readable, and
/// the read itself does not wait.
pub(super) async fn read(
    stream: &TcpStream,
    buf: &mut BytesMut,
) -> io::Result<(usize, Option<Instant>)> {
    loop {
        // The socket's single reader slot, not `readable()`'s waiter list (see the server's connection loop).
        std::future::poll_fn(|cx| stream.poll_read_ready(cx)).await?;
        let mut drained = None;
        let read = stream.try_io(Interest::READABLE, || {
            let (n, arrived, room) = recv(stream, buf)?;
            if n > 0 && n < room {
                // A short read emptied the receive queue: say "would block" so that tokio clears the
                // readiness now, instead of the next read finding nothing (a system call per message).
                drained = Some((n, arrived));
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok((n, arrived))
        });
        match read {
            Ok(read) => return Ok(read),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Some(read) = drained {
                    return Ok(read);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// One non-blocking `recvmsg` into `buf`'s spare room: (bytes read, arrival, room offered).
#[cfg(target_os = "linux")]
fn recv(stream: &TcpStream, buf: &mut BytesMut) -> io::Result<(usize, Option<Instant>, usize)> {
    use std::os::fd::AsRawFd;
    if buf.capacity() - buf.len() < READ_ROOM {
        buf.reserve(READ_ROOM);
    }
    let spare = buf.spare_capacity_mut();
    let room = spare.len();
    let mut iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: room,
    };
    // Room for one timespec control message, aligned for `cmsghdr`.
    let mut control = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid (no name, no buffers); the fields set below point at live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: the fd is a live socket; `msg` points at `iov` (the buffer's spare room) and `control`, both
    // alive for the call. The socket is non-blocking, so the call does not wait.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, 0) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    // SAFETY: the kernel wrote `n` bytes into the spare room, right after the initialized part.
    unsafe { buf.set_len(buf.len() + n) };
    let mut stamp = None;
    // SAFETY: the CMSG_* walk stays within `msg_control`/`msg_controllen`, which the kernel set.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                stamp = Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(cmsg).cast::<libc::timespec>(),
                ));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n, stamp.and_then(to_instant), room))
}

#[cfg(not(target_os = "linux"))]
fn recv(stream: &TcpStream, buf: &mut BytesMut) -> io::Result<(usize, Option<Instant>, usize)> {
    if buf.capacity() - buf.len() < READ_ROOM {
        buf.reserve(READ_ROOM);
    }
    let room = buf.capacity() - buf.len();
    let n = stream.try_read_buf(buf)?;
    Ok((n, None, room))
}

/// A realtime-clock stamp as an `Instant`: now, less how long ago the stamp was.
#[cfg(target_os = "linux")]
fn to_instant(stamp: libc::timespec) -> Option<Instant> {
    let now = Instant::now();
    let mut realtime = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `realtime` is a valid timespec to write.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut realtime) } != 0 {
        return None;
    }
    let age_ns = i128::from(realtime.tv_sec - stamp.tv_sec) * 1_000_000_000
        + i128::from(realtime.tv_nsec - stamp.tv_nsec);
    let age = Duration::from_nanos(u64::try_from(age_ns.max(0)).ok()?);
    if age > AGE_MAX {
        return None;
    }
    now.checked_sub(age)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn a_read_says_when_its_bytes_arrived() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        enable(&client);
        let (mut server, _) = listener.accept().await.unwrap();

        // Linux turns receive stamps on for the whole system from deferred work when the first socket asks,
        // so the first segments after that can arrive unstamped (a CI run saw it): wait for a stamped one.
        let mut buf = BytesMut::new();
        if cfg!(target_os = "linux") {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                server.write_all(b"x").await.unwrap();
                let (n, arrived) = read(&client, &mut buf).await.unwrap();
                assert!(n >= 1);
                if arrived.is_some() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the kernel never stamped a loopback segment"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            buf.clear();
        }

        let before = Instant::now();
        server.write_all(b"hello").await.unwrap();
        let written = Instant::now();
        // The bytes wait in the socket while the reader is busy elsewhere.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (n, arrived) = read(&client, &mut buf).await.unwrap();
        let read_at = Instant::now();
        assert_eq!(n, 5);
        assert_eq!(&buf[..], b"hello");
        if cfg!(target_os = "linux") {
            let arrived = arrived.expect("the kernel stamps loopback segments");
            // Stamped when the write delivered them, not when they were read 200 ms later. The stamp goes
            // through the realtime clock, whose reading beside the monotonic one a busy machine may delay:
            // the bounds leave 50 ms either side.
            let slack = Duration::from_millis(50);
            assert!(arrived + slack >= before, "{arrived:?} {before:?}");
            assert!(arrived <= written + slack, "{arrived:?} {written:?}");
            assert!(read_at.duration_since(arrived) >= Duration::from_millis(100));
        }

        // A second message: a new stamp; and the end of the stream reads as 0 bytes.
        server.write_all(b"again").await.unwrap();
        let (n, _) = read(&client, &mut buf).await.unwrap();
        assert_eq!(n, 5);
        assert_eq!(&buf[..], b"helloagain");
        drop(server);
        let (n, _) = read(&client, &mut buf).await.unwrap();
        assert_eq!(n, 0);
    }
}
