//! Group commit, durability notification, backpressure and waiting for data.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetwire_log::{Log, LogConfig};

const TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn concurrent_appenders_share_fsyncs() {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let heard = Arc::new(Mutex::new(Vec::new()));
    let heard_by_listener = Arc::clone(&heard);
    let log = Arc::new(
        Log::open_with_listener(
            LogConfig::new(dir.path()),
            Box::new(move |seq| heard_by_listener.lock().unwrap().push(seq)),
        )
        .unwrap(),
    );
    let start = Arc::new(std::sync::Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let log = Arc::clone(&log);
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                for i in 0..PER_THREAD {
                    // Like an MQTT connection with one message in flight: append, wait, repeat.
                    let mut payload = [0u8; 100];
                    payload[..8].copy_from_slice(&t.to_le_bytes());
                    payload[8..16].copy_from_slice(&i.to_le_bytes());
                    let seq = log.append((t % 4) as u32, &payload).unwrap();
                    log.wait_durable(seq, TIMEOUT).unwrap();
                    assert!(log.durable_seq() >= seq);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }

    let stats = log.stats();
    let appends = THREADS * PER_THREAD;
    println!("{stats:?}");
    assert_eq!(stats.appends, appends);
    assert_eq!(stats.append_bytes, appends * 100);
    assert_eq!(stats.durable_seq, appends);
    assert!(stats.commits < appends, "no batching: {stats:?}");
    assert!(stats.commit_records_max > 1, "no batching: {stats:?}");
    assert!(
        stats.fsyncs >= stats.commits,
        "every commit syncs: {stats:?}"
    );

    // Each thread's records are all there, in its own order, in its partition.
    for partition in 0..4u32 {
        let mut next_i = [0u64; THREADS as usize];
        let mut reader = log.reader(partition, 0).unwrap();
        while let Some(record) = reader.next_record().unwrap() {
            let t = u64::from_le_bytes(record.payload[..8].try_into().unwrap());
            let i = u64::from_le_bytes(record.payload[8..16].try_into().unwrap());
            assert_eq!(t % 4, u64::from(partition));
            assert_eq!(i, next_i[t as usize], "thread {t} out of order");
            next_i[t as usize] += 1;
        }
        for t in (0..THREADS).filter(|t| t % 4 == u64::from(partition)) {
            assert_eq!(next_i[t as usize], PER_THREAD);
        }
    }

    // The listener heard every commit, in order, ending at the last seq. (Close first: the
    // writer calls the listener just after publishing, so it may still be running.)
    Arc::into_inner(log).unwrap().close().unwrap();
    let heard = heard.lock().unwrap().clone();
    assert_eq!(heard.len() as u64, stats.commits);
    assert!(heard.windows(2).all(|w| w[0] < w[1]), "{heard:?}");
    assert_eq!(heard.last(), Some(&appends));
}

#[test]
fn full_queue_blocks_appenders_instead_of_growing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path());
    config.queue_bytes_max = 256;
    let log = Arc::new(Log::open(config).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (log, done) = (Arc::clone(&log), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut max_seen = 0;
            while !done.load(Ordering::Acquire) {
                max_seen = max_seen.max(log.stats().queued_bytes);
            }
            max_seen
        })
    };
    let appenders: Vec<_> = (0..4u32)
        .map(|p| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                (0..300)
                    .map(|_| log.append(p, &[7; 50]).unwrap())
                    .max()
                    .unwrap()
            })
        })
        .collect();
    let last = appenders
        .into_iter()
        .map(|a| a.join().unwrap())
        .max()
        .unwrap();
    log.wait_durable(last, TIMEOUT).unwrap();
    done.store(true, Ordering::Release);
    let max_seen = sampler.join().unwrap();
    assert!(max_seen <= 256, "queue held {max_seen} bytes");
    assert_eq!(log.stats().appends, 1200);
    assert_eq!(log.end_offset(0).unwrap(), 300 * 58);
}

#[test]
fn commits_start_at_most_once_per_delay() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path());
    config.group_commit_max_delay_us = 1_000_000;
    let log = Log::open(config).unwrap();
    // A record that finds the writer idle is committed at once: it waits for its fsync, not the window.
    let started = Instant::now();
    let first = log.append(0, b"x").unwrap();
    log.wait_durable(first, TIMEOUT).unwrap();
    let first_durable = started.elapsed();
    // The next commit may start only a whole delay after the first one started: this record waits for the
    // rest of the window, and so do the records appended meanwhile, which share its commit.
    let second = log.append(0, b"y").unwrap();
    let third = log.append(1, b"z").unwrap();
    log.wait_durable(third, TIMEOUT).unwrap();
    assert!(log.durable_seq() >= second);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "second commit after {:?}",
        started.elapsed()
    );
    assert!(
        first_durable < Duration::from_secs(1),
        "a lone record on an idle log waited {first_durable:?}"
    );
    assert_eq!(log.stats().commits, 2);
}

#[test]
fn wait_for_data_blocks_until_the_partition_grows() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::open(LogConfig::new(dir.path())).unwrap());

    // Timeout: returns the unchanged end after the timeout.
    let started = Instant::now();
    assert_eq!(
        log.wait_for_data(1, 0, Duration::from_millis(30)).unwrap(),
        0
    );
    assert!(started.elapsed() >= Duration::from_millis(30));

    let processor = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut reader = log.reader(1, 0).unwrap();
            let mut got = Vec::new();
            // A processor's loop: read everything durable, then block until there is more.
            loop {
                while let Some(record) = reader.next_record().unwrap() {
                    got.push(record.payload.to_vec());
                }
                if got.len() == 3 {
                    return got;
                }
                let end = log.wait_for_data(1, reader.offset(), TIMEOUT).unwrap();
                assert!(
                    end > reader.offset(),
                    "woken without new data before the timeout"
                );
            }
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    log.append(1, b"one").unwrap();
    log.append(0, b"other partition").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let seq = log
        .append_batch(&[(1, b"two".as_slice()), (1, b"three")])
        .unwrap();
    log.wait_durable(seq, TIMEOUT).unwrap();
    let got = processor.join().unwrap();
    assert_eq!(
        got,
        vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
    );
}
