//! Inbound image handling (issue 23): a 12-megapixel JPEG photo, as a phone sends it, made
//! into the part a model gets. Targets: at most 150 ms and 120 MB of peak memory on this
//! machine's 2 cores.
//!
//! - `media/prepare_image/12mp_jpeg`: decode, EXIF orientation, downscale to 1568 px,
//!   re-encode within 5 MB of base64 (the CPU work);
//! - `media/receive/12mp_jpeg`: the whole intake of one attachment: the download (64 KiB
//!   chunks from a memory channel), the sniff, the preparation on a blocking thread, the
//!   write to the content-addressed store.
//!
//! Peak memory is measured around one intake by a counting allocator: the most bytes the
//! process held at once, less what it held before (the test photo itself). Run with
//! `cargo bench --bench media`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::io::Cursor;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use ferry::channel::memory::MemoryChannel;
use ferry::channel::{Attachment, AttachmentKind};
use ferry::config::{Environment, MediaConfig};
use ferry::media::{Media, prepare_image};
use image::codecs::jpeg::JpegEncoder;
use image::{Rgb, RgbImage};

/// Counts live heap bytes and their high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(pointer, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A 4000×3000 photo-like JPEG at quality 90: smooth light with fine grain, so it decodes
/// and compresses like a camera's (about 4 MB).
fn photo() -> Vec<u8> {
    let mut state = 0x9e37_79b9_u32;
    let image = RgbImage::from_fn(4000, 3000, |x, y| {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let grain = (state >> 28) as u8;
        Rgb([(x / 16) as u8 ^ grain, (y / 12) as u8 ^ grain, ((x + y) / 28) as u8 ^ grain])
    });
    let mut bytes = Cursor::new(Vec::new());
    let encoder = JpegEncoder::new_with_quality(&mut bytes, 90);
    image.write_with_encoder(encoder).expect("encode the photo");
    bytes.into_inner()
}

fn media(c: &mut Criterion) {
    let jpeg = photo();
    println!("input: 4000×3000 JPEG, {} bytes", jpeg.len());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let store = tempfile::tempdir().expect("temp dir");
    let media = Arc::new(
        Media::open(store.path(), &MediaConfig::default(), &Environment::new(Vec::<(String, String)>::new(), "/"))
            .expect("media"),
    );
    let channel = MemoryChannel::new("memory", "default");
    channel.serve_file("photo", jpeg.clone());
    let attachment = Attachment::remote(AttachmentKind::Image, "photo");

    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let received = runtime.block_on(media.receive(&channel, std::slice::from_ref(&attachment)));
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let part = received.media[0].image.as_ref().expect("an image");
    println!(
        "one intake: model part {}×{} {}, peak heap above the baseline {:.1} MB",
        part.width,
        part.height,
        part.media_type,
        peak as f64 / (1024.0 * 1024.0)
    );
    drop(received);

    let mut group = c.benchmark_group("media");
    group.sample_size(20);
    group.bench_function("prepare_image/12mp_jpeg", |b| b.iter(|| prepare_image(black_box(&jpeg))));
    group.bench_function("receive/12mp_jpeg", |b| {
        b.to_async(&runtime).iter(|| media.receive(&channel, std::slice::from_ref(&attachment)))
    });
    group.finish();
}

criterion_group!(benches, media);
criterion_main!(benches);
