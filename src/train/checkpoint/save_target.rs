//! Where a save may write: a regular file, or a new path in an existing folder. Checkpoints,
//! moments files, metrics and reports are refused anything else (a device node, a folder, a
//! FIFO, a socket, or a symlink to one of these), because the atomic rename would replace
//! it (`--save /dev/full` as root replaced the device node) or the write would block or fail
//! only after the training it was meant to keep.

use std::fs::{FileType, Metadata};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Checks `path` as a save target before a run starts (the CLI's `--save`, `--metrics`,
/// `--report`, `--png`; `what` names the flag in the message) and returns where the save
/// writes: `path` itself, or for a symlink the regular file it points to (saves write
/// through links and keep them). Refused, with one line: anything that is not a regular
/// file or a new path, a folder that does not exist, and a folder where no file can be
/// created (a temp file is made and removed to find out).
pub fn check_save_target(path: &Path, what: &str) -> Result<PathBuf> {
    let target = resolve_save_target(path, what)?;
    let dir = parent_dir(&target);
    let probe = dir.join(format!("{}{}", temp_prefix(&target), temp_suffix()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| {
            refuse(
                path,
                what,
                &format!("no file can be created in its folder ({e})"),
            )
        })?;
    let _ = std::fs::remove_file(&probe);
    Ok(target)
}

/// [`check_save_target`] without the probe file: what every atomic write checks again
/// just before it writes (the path may have changed since the run started).
pub(super) fn resolve_save_target(path: &Path, what: &str) -> Result<PathBuf> {
    if path.file_name().is_none() {
        return Err(refuse(path, what, "is not a file path"));
    }
    let target = match std::fs::symlink_metadata(path) {
        // Nothing there (or its folder is not one: said below).
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            path.to_path_buf()
        }
        Err(e) => return Err(refuse(path, what, &e.to_string())),
        Ok(m) if m.is_file() => path.to_path_buf(),
        Ok(m) if m.file_type().is_symlink() => {
            let resolved = std::fs::canonicalize(path)
                .map_err(|e| refuse(path, what, &format!("is a symlink to nothing ({e})")))?;
            let m = std::fs::metadata(&resolved).map_err(|e| refuse(path, what, &e.to_string()))?;
            if !m.is_file() {
                let why = format!("is a symlink to {} ({})", kind(&m), resolved.display());
                return Err(refuse(path, what, &why));
            }
            resolved
        }
        Ok(m) => return Err(refuse(path, what, &format!("is {}", kind(&m)))),
    };
    let dir = parent_dir(&target);
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(target),
        Ok(_) => Err(refuse(
            path,
            what,
            &format!("its folder {} is not a directory", dir.display()),
        )),
        Err(e) => Err(refuse(
            path,
            what,
            &format!("its folder {} cannot be used ({e})", dir.display()),
        )),
    }
}

fn refuse(path: &Path, what: &str, why: &str) -> Error {
    Error::InvalidArgument(format!(
        "{what} {}: {why}; a save goes only to a regular file or a new path",
        path.display()
    ))
}

/// What a file that is not a regular file is, in words.
fn kind(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symlink"
    } else {
        special_kind(&t)
    }
}

#[cfg(unix)]
fn special_kind(t: &FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &FileType) -> &'static str {
    "not a regular file"
}

/// The prefix of `path`'s temp files (`.{name}.tmp-{pid}`).
pub(super) fn temp_prefix(path: &Path) -> String {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    format!(".{name}.tmp-")
}

/// What follows a temp file's prefix: this process's id, then a number no other write of
/// this process uses, so two writers (processes or threads) never share a temp file.
pub(super) fn temp_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The directory `path` is in (`.` for a bare file name).
pub(super) fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}
