//! Cache hints: loads started early so that a later read of cold memory does not wait for it.
//!
//! On x86-64 they are `prefetcht0`; elsewhere they do nothing.

/// A hint that the cache line holding `p` will be read or written soon; it never reads or writes `p`
/// (and does nothing on other architectures).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it does not access memory as far as the program is
    // concerned and cannot fault, whatever the address (one past the end of an allocation included).
    #[allow(unsafe_code)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Prefetches every cache line of `object`, so that reading its fields later does not wait for memory.
pub fn prefetch_object<T>(object: &T) {
    let start = std::ptr::from_ref(object).cast::<u8>();
    let mut offset = 0;
    while offset < std::mem::size_of::<T>() {
        prefetch(start.wrapping_add(offset));
        offset += CACHE_LINE;
    }
    // The last line, when the object does not start on a line boundary.
    prefetch(start.wrapping_add(std::mem::size_of::<T>().saturating_sub(1)));
}

const CACHE_LINE: usize = 64;
