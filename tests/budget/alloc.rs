//! The counting allocator: the system's, with the allocations (and the
//! live bytes) of the threads that asked to be counted. With
//! `BUDGET_ALLOCATION_SITES=1`, one counted allocation in 64 also records
//! where it was made ([`print_sites`]): what to look at when the budget is
//! exceeded. With `BUDGET_HELD_SIZES=1`, the allocations made while held
//! chats open and still live are kept by size ([`print_held`]), and those of
//! 1 KiB or more by where they were made: what an open chat holds.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
    sync::atomic::{AtomicI64, AtomicU64, Ordering},
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
    /// Inside the allocator's own bookkeeping (a site being recorded).
    static RECORDING: Cell<bool> = const { Cell::new(false) };
}

/// A live allocation's size and, for a large one, where it was made.
type Held = (usize, Option<std::backtrace::Backtrace>);

/// Live allocations made while [`track_held`] is on: address → size and,
/// for large ones, where.
static HELD: std::sync::Mutex<Option<std::collections::HashMap<usize, Held>>> = std::sync::Mutex::new(None);
static TRACK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keeps (or stops keeping) the live allocations, when `BUDGET_HELD_SIZES`
/// is set.
pub fn track_held(on: bool) {
    if std::env::var_os("BUDGET_HELD_SIZES").is_some() {
        TRACK.store(on, Ordering::Relaxed);
    }
}

fn held_alloc(ptr: *mut u8, size: usize) {
    if !TRACK.load(Ordering::Relaxed) || RECORDING.with(|r| r.replace(true)) {
        return;
    }
    let site = (size >= 1024).then(std::backtrace::Backtrace::force_capture);
    if let Ok(mut held) = HELD.lock() {
        held.get_or_insert_with(Default::default).insert(ptr as usize, (size, site));
    }
    RECORDING.with(|r| r.set(false));
}

fn held_free(ptr: *mut u8) {
    if RECORDING.with(|r| r.replace(true)) {
        return;
    }
    if let Ok(mut held) = HELD.lock() {
        if let Some(held) = held.as_mut() {
            held.remove(&(ptr as usize));
        }
    }
    RECORDING.with(|r| r.set(false));
}

/// What the allocations kept by [`track_held`] hold, by size, then by the
/// sites of the large ones.
pub fn print_held(chats: usize) {
    let Ok(mut held) = HELD.lock() else { return };
    let Some(held) = held.take() else { return };
    let mut sizes: std::collections::BTreeMap<usize, usize> = Default::default();
    let mut sites: std::collections::HashMap<String, (usize, usize)> = Default::default();
    for (size, site) in held.values() {
        *sizes.entry(*size).or_default() += 1;
        if let Some(site) = site {
            let entry = sites.entry(frames(&site.to_string(), 8)).or_default();
            entry.0 += 1;
            entry.1 += size;
        }
    }
    let mut by_bytes: Vec<_> = sizes.iter().map(|(size, n)| (size * n, *size, *n)).collect();
    by_bytes.sort_by(|a, b| b.cmp(a));
    println!("held, by size (bytes per chat, size, count):");
    for (bytes, size, n) in by_bytes.iter().take(30) {
        println!("{:8.0} {size:7} ×{n}", *bytes as f64 / chats as f64);
    }
    let mut sites: Vec<_> = sites.into_iter().collect();
    sites.sort_by_key(|site| std::cmp::Reverse(site.1.1));
    println!("held allocations of 1 KiB or more, by site (bytes per chat, count):");
    for (site, (n, bytes)) in sites.iter().take(25) {
        println!("{:8.0} ×{n} {site}", *bytes as f64 / chats as f64);
    }
}

/// The first `n` frames of a backtrace after the allocation's own (the
/// allocator, the bookkeeping, std's and collections' allocating calls).
fn frames(trace: &str, n: usize) -> String {
    const ALLOCATING: &[&str] = &[
        "backtrace",
        "held_alloc",
        "record_site",
        "call_once",
        "then<",
        "alloc",
        "grow",
        "reserve",
        "with_capacity",
        "new_uninitialized",
        "from_iter",
        "to_vec",
        "to_owned",
        "clone",
    ];
    let frames: Vec<&str> = trace
        .lines()
        .map(str::trim)
        .filter(|l| l.contains(": ") && !l.starts_with("at "))
        .map(|l| l.split_once(": ").map_or(l, |(_, f)| f))
        .skip_while(|f| ALLOCATING.iter().any(|a| f.contains(a)) || f.starts_with("std::") || f.starts_with("core::"))
        .take(n)
        .collect();
    frames.join(" <- ")
}

/// Sampled allocations' backtraces, resolved only when printed (resolving
/// inside the allocator can deadlock).
static SITES: std::sync::Mutex<Vec<std::backtrace::Backtrace>> = std::sync::Mutex::new(Vec::new());
static SAMPLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Turns the sampling of allocation sites on when `BUDGET_ALLOCATION_SITES`
/// is set. Called once, before the counted threads start.
pub fn sample_sites() {
    let _ = SAMPLE.set(std::env::var_os("BUDGET_ALLOCATION_SITES").is_some());
}

/// Records where this (counted) allocation was made, one in 64.
fn record_site() {
    // Set by `sample_sites` before anything is counted: reading the
    // environment here would allocate inside this very call.
    if SAMPLE.get() != Some(&true) {
        return;
    }
    if ALLOCATIONS.load(Ordering::Relaxed) % 64 != 0 || RECORDING.with(|r| r.replace(true)) {
        return;
    }
    let site = std::backtrace::Backtrace::force_capture();
    if let Ok(mut sites) = SITES.lock() {
        sites.push(site);
    }
    RECORDING.with(|r| r.set(false));
}

/// The recorded allocation sites, most frequent first.
pub fn print_sites() {
    let Ok(mut sites) = SITES.lock() else { return };
    let mut counts: std::collections::HashMap<String, u64> = Default::default();
    for site in sites.drain(..) {
        *counts.entry(frames(&site.to_string(), 10)).or_default() += 1;
    }
    let mut counts: Vec<_> = counts.into_iter().collect();
    counts.sort_by_key(|count| std::cmp::Reverse(count.1));
    for (site, n) in counts.iter().take(40) {
        println!("{n:6} {site}");
    }
}

/// Counts (or stops counting) what this thread allocates.
pub fn count_this_thread(counted: bool) {
    COUNTED.with(|c| c.set(counted));
}

/// Allocations (reallocations included) of the counted threads so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Bytes the counted threads allocated and have not freed.
pub fn live_bytes() -> i64 {
    LIVE_BYTES.load(Ordering::Relaxed)
}

fn counted() -> bool {
    // During a thread's teardown its locals may be gone: not counted.
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

struct Counting;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counted() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
            record_site();
            let ptr = unsafe { System.alloc(layout) };
            held_alloc(ptr, layout.size());
            return ptr;
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if counted() {
            LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        }
        if TRACK.load(Ordering::Relaxed) {
            held_free(ptr);
        }
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counted() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
            if TRACK.load(Ordering::Relaxed) {
                held_free(ptr);
                let new = unsafe { System.realloc(ptr, layout, new_size) };
                held_alloc(new, new_size);
                return new;
            }
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
