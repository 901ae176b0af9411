//! The data directory fetched sets live in, and reading its files with errors that say what
//! to do.

use std::path::{Path, PathBuf};

use super::file_caps;
use crate::{Error, Result};

/// Environment variable that overrides the data directory.
pub const DATA_DIR_ENV: &str = "WEBGPU_AMP_DATA_DIR";
/// The script that downloads the full data sets.
pub const FETCH_SCRIPT: &str = "scripts/fetch-data.sh";

/// Where fetched data sets live: `$WEBGPU_AMP_DATA_DIR` if set, else `data/` relative to the
/// current directory.
pub fn data_dir() -> PathBuf {
    match std::env::var_os(DATA_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from("data"),
    }
}

/// The error for a data set that has not been fetched.
pub(crate) fn missing_data_error(what: &str, dir: &Path, detail: &str) -> Error {
    Error::data(format!(
        "{what} not found in {} ({detail}); run `bash {FETCH_SCRIPT}` to download it, or set \
         {DATA_DIR_ENV} to the folder that holds `mnist/`, `fashion-mnist/` and `shakespeare/` \
         (the embedded `default` and `hamlet` sets need no download)",
        dir.display()
    ))
}

/// Reads a whole data file (at most [`file_caps::DATA_FILE`]), naming it in the error.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    file_caps::read_capped(path, file_caps::DATA_FILE).map_err(Error::data)
}

/// Reads a whole text file (at most [`file_caps::TEXT_FILE`]), naming it in the error.
pub(crate) fn read_text_file(path: &Path) -> Result<Vec<u8>> {
    // Text streams (`text:/dev/stdin`, a FIFO) may wait on a writer: when no end of file
    // has come after a moment, say so, as nothing else would tell why the command sits there.
    #[cfg(unix)]
    let _waiting = {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(path)
            .is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_char_device())
            .then(|| WaitingNote::after(std::time::Duration::from_secs(2), path))
    };
    file_caps::read_capped(path, file_caps::TEXT_FILE).map_err(Error::data)
}

/// A line on stderr if a read is still going after `delay` (dropped when it ends).
#[cfg(unix)]
struct WaitingNote(std::sync::Arc<std::sync::atomic::AtomicBool>);

#[cfg(unix)]
impl WaitingNote {
    fn after(delay: std::time::Duration, path: &Path) -> Self {
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
                    "{what}: reading text from a pipe/device: waiting for data (until end of file)"
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
