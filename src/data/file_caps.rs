//! The most bytes each kind of file may hold before it is read whole. A file over its cap
//! is an error naming the file and the cap, found from its size before anything is read,
//! or, for what has no size (`/dev/zero`, a pipe), after reading one byte past the cap:
//! never an allocation without bound. The kinds with caps of gigabytes (data, checkpoints,
//! moments) are read only from regular files, whose size is known first: gigabytes read
//! from `/dev/zero` before the cap would be what the cap is there to prevent. The caps are
//! far above what the files here need (docs/guide/troubleshooting.md lists them).

use std::io::Read;
use std::path::Path;

/// A kind of file and the most bytes one may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileCap {
    /// The kind, for messages ("text file").
    pub what: &'static str,
    /// What a read of it from a pipe waits for ("text", "a model"): said when it waits.
    pub noun: &'static str,
    pub bytes: u64,
    /// Whether it may come from a pipe or a device (read up to the cap), or only from a
    /// regular file.
    pub streams: bool,
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// `text:FILE` and the Shakespeare texts: 256 MiB of characters (about 10 bytes of host
/// memory each while the vocabulary and ids are made; nanoGPT's shakespeare is 1.1 MB,
/// enwik8 100 MB).
pub const TEXT_FILE: FileCap = FileCap::streamed("text file", "text", 256 * MIB);

/// Data files: a safetensors data set, an IDX file, a Fashion-MNIST class file (full MNIST
/// is 47 MB uncompressed; its f32 samples 188 MB).
pub const DATA_FILE: FileCap = FileCap::regular("data file", "data", 2 * GIB);

/// JSON model descriptions (a few hundred bytes for any model here).
pub const MODEL_FILE: FileCap = FileCap::streamed("model file", "a model", 16 * MIB);

/// Kernel tuning files (`--tuning`: a table and its timings; the H200's is 150 kB).
pub const TUNING_FILE: FileCap = FileCap::streamed("tuning file", "a tuning file", 16 * MIB);

/// Checkpoints and `--init` parameter files: 4 GiB, a billion f32 parameters (gpt-char's
/// checkpoint is 43 MB).
pub const CHECKPOINT_FILE: FileCap = FileCap::regular("checkpoint", "a checkpoint", 4 * GIB);

/// Moments files: Adam's two moments of a checkpoint at its cap.
pub const MOMENTS_FILE: FileCap = FileCap::regular("moments file", "moments", 8 * GIB);

/// Hugging Face `tokenizer.json` files (SmolLM2's is 2.1 MB, Llama 3's 9 MB).
pub const TOKENIZER_FILE: FileCap = FileCap::streamed("tokenizer file", "a tokenizer", 64 * MIB);

impl FileCap {
    /// A kind that may also come from a pipe or a device (read up to the cap).
    const fn streamed(what: &'static str, noun: &'static str, bytes: u64) -> Self {
        Self {
            streams: true,
            ..Self::regular(what, noun, bytes)
        }
    }

    /// A kind read only from regular files (its size known before anything is read).
    const fn regular(what: &'static str, noun: &'static str, bytes: u64) -> Self {
        Self {
            what,
            noun,
            bytes,
            streams: false,
        }
    }

    /// The cap in words: `256 MiB` or `2 GiB`.
    pub fn size(&self) -> String {
        if self.bytes.is_multiple_of(GIB) {
            format!("{} GiB", self.bytes / GIB)
        } else {
            format!("{} MiB", self.bytes / MIB)
        }
    }

    fn too_big(&self, path: &Path, size: Option<u64>) -> String {
        let size = size.map_or_else(|| "more than".to_string(), |n| format!("{n} bytes, over"));
        format!(
            "{}: {size} the {} cap of {} ({} bytes)",
            path.display(),
            self.what,
            self.size(),
            self.bytes
        )
    }
}

/// The whole file at `path`, or why not: it cannot be read, or it holds more than `cap`.
/// Messages name the file (and the cap).
pub fn read_capped(path: &Path, cap: FileCap) -> Result<Vec<u8>, String> {
    let cannot = |e: std::io::Error| format!("{}: cannot read: {e}", path.display());
    // A pipe or a device (`text:/dev/stdin`, a FIFO) may wait on a writer, opening included:
    // when no byte has come after a moment, say so, as nothing else would tell why the
    // command sits there (a device that streams, /dev/zero under load, is not waiting).
    #[cfg(unix)]
    let mut waiting = {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(path)
            .is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_char_device())
            .then(|| WaitingNote::after(std::time::Duration::from_secs(2), path, cap.noun))
    };
    let file = std::fs::File::open(path).map_err(cannot)?;
    // A regular file says its size; a device or a pipe says nothing useful.
    let size = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    if size.is_none() && !cap.streams {
        return Err(format!(
            "{}: not a regular file; a {} is read only from a regular file, whose size is \
             known before it is read (the cap is {})",
            path.display(),
            cap.what,
            cap.size()
        ));
    }
    if let Some(n) = size
        && n > cap.bytes
    {
        return Err(cap.too_big(path, Some(n)));
    }
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(size.unwrap_or(0) as usize)
        .map_err(|_| {
            format!(
                "{}: its {} bytes do not fit in this machine's memory",
                path.display(),
                size.unwrap_or(0)
            )
        })?;
    let mut file = file.take(cap.bytes + 1);
    #[cfg(unix)]
    {
        // The note waits for the first byte only.
        let mut first = [0u8; 1];
        let n = loop {
            match file.read(&mut first) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                read => break read.map_err(cannot)?,
            }
        };
        bytes.extend_from_slice(&first[..n]);
        waiting.take();
    }
    file.read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > cap.bytes {
        return Err(cap.too_big(path, None));
    }
    Ok(bytes)
}

/// A line on stderr if no byte has come after `delay` (dropped when the first one comes).
#[cfg(unix)]
struct WaitingNote(std::sync::Arc<std::sync::atomic::AtomicBool>);

#[cfg(unix)]
impl WaitingNote {
    fn after(delay: std::time::Duration, path: &Path, noun: &'static str) -> Self {
        use std::sync::atomic::Ordering;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = done.clone();
        let what = path.display().to_string();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while start.elapsed() < delay {
                if seen.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if !seen.load(Ordering::Relaxed) {
                eprintln!(
                    "{what}: reading {noun} from a pipe/device: waiting for data (until end of file)"
                );
            }
        });
        WaitingNote(done)
    }
}

#[cfg(unix)]
impl Drop for WaitingNote {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_its_cap_is_refused_by_size_and_a_device_after_the_cap() {
        let dir = std::env::temp_dir().join(format!("webgpu-amp-caps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("five.txt");
        std::fs::write(&path, b"12345").unwrap();
        let cap = |bytes| FileCap {
            what: "test file",
            noun: "a test file",
            bytes,
            streams: true,
        };
        assert_eq!(read_capped(&path, cap(5)).unwrap(), b"12345");
        let e = read_capped(&path, cap(4)).unwrap_err();
        assert!(
            e.contains("five.txt: 5 bytes, over the test file cap"),
            "{e}"
        );
        #[cfg(unix)]
        {
            let e = read_capped(Path::new("/dev/zero"), cap(1000)).unwrap_err();
            assert!(
                e.contains("/dev/zero: more than the test file cap of"),
                "{e}"
            );
            // A checkpoint from /dev/zero is refused before a byte is read (with its 4 GiB
            // cap it would take gigabytes of memory to find out).
            let e = read_capped(Path::new("/dev/zero"), CHECKPOINT_FILE).unwrap_err();
            assert!(
                e.contains("/dev/zero: not a regular file; a checkpoint is read only from"),
                "{e}"
            );
        }
        let e = read_capped(&dir.join("none"), cap(4)).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn caps_read_in_words() {
        assert_eq!(TEXT_FILE.size(), "256 MiB");
        assert_eq!(DATA_FILE.size(), "2 GiB");
        assert_eq!(MODEL_FILE.size(), "16 MiB");
    }
}
