//! The hot path allocates nothing: decoding a QoS 1 PUBLISH only bumps the reference count of
//! the read buffer (its topic and payload are slices of it) and encoding a PUBACK into a buffer
//! with room writes in place. Measured with a counting global allocator, which is why this is
//! its own test binary.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::BytesMut;
use fleetwire_mqtt::*;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    let value = f();
    (value, ALLOCATIONS.load(Ordering::SeqCst) - before)
}

// One test function, so no other test thread allocates while we count.
#[test]
fn hot_path_does_not_allocate() {
    // The counter sees allocations at all.
    let (_, allocations) = allocations_during(|| std::hint::black_box(String::from("x")));
    assert!(allocations >= 1);

    let qos1 = b"\x32\x2d\x00\x17v1/devices/me/telemetry\x00\x0a{\"temperature\":21}";
    let qos1_v5 = b"\x32\x2e\x00\x17v1/devices/me/telemetry\x00\x0a\x00{\"temperature\":21}";
    for (protocol, bytes) in [(Protocol::V311, &qos1[..]), (Protocol::V5, &qos1_v5[..])] {
        let mut buf = BytesMut::with_capacity(4096);
        for _ in 0..3 {
            buf.extend_from_slice(bytes);
        }
        // The first split turns the buffer into a shared one: that is the one allocation
        // (the reference count) a connection pays, not one per packet.
        let first = decode(&mut buf, protocol, 1 << 20).unwrap().unwrap();
        let (second, allocations) = allocations_during(|| decode(&mut buf, protocol, 1 << 20));
        assert_eq!(allocations, 0, "{protocol:?} decode allocated");
        let Ok(Some(Packet::Publish(publish))) = second else {
            panic!("not a PUBLISH: {second:?}");
        };
        assert_eq!(publish.topic, "v1/devices/me/telemetry");
        assert_eq!(&publish.payload[..], b"{\"temperature\":21}");
        assert_eq!(publish.pkid, 10);
        assert_eq!(Packet::Publish(publish), first);

        let mut out = BytesMut::with_capacity(64);
        let (encoded, allocations) =
            allocations_during(|| encode(&Packet::PubAck(PubAck::new(10)), protocol, &mut out));
        encoded.unwrap();
        assert_eq!(allocations, 0, "{protocol:?} PUBACK encode allocated");
        assert_eq!(&out[..], b"\x40\x02\x00\x0a");
    }
}
