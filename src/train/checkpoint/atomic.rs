//! Atomic file writes: a temp file beside the target, fsync, rename; and the clean-up of
//! temp files that killed writers left behind.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// The prefix of `path`'s temp files (`.{name}.tmp-{pid}`).
pub(super) fn temp_prefix(path: &Path) -> String {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    format!(".{name}.tmp-")
}

/// The directory `path` is in (`.` for a bare file name).
pub(super) fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Write `bytes` to `path` atomically: a crash at any point leaves either the old file or
/// the new one, never a torn one. `before_rename` runs on the synced temp file (the save
/// test hook).
pub(super) fn write_atomic(
    path: &Path,
    bytes: &[u8],
    before_rename: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    let dir = parent_dir(path);
    if path.file_name().is_none() {
        return Err(Error::Checkpoint(format!(
            "{}: not a file path",
            path.display()
        )));
    }
    let prefix = temp_prefix(path);
    let tmp = dir.join(format!("{prefix}{}", std::process::id()));
    let io = |e: std::io::Error, what: &str| {
        Error::Checkpoint(format!("{}: {what}: {e}", path.display()))
    };
    // The temp file stays locked until it is renamed: a lock a later save can take
    // belongs to a writer that died (the OS drops locks with the process).
    let mut f = std::fs::File::create(&tmp).map_err(|e| io(e, "creating temp file"))?;
    let _ = f.try_lock();
    f.write_all(bytes).map_err(|e| io(e, "writing"))?;
    f.sync_all().map_err(|e| io(e, "syncing"))?;
    before_rename(&tmp)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e, "renaming into place")
    })?;
    drop(f);
    remove_stale_temp_files(dir, &prefix);
    // Make the rename itself durable.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Deletes temp files of killed writers (`{prefix}{pid}` in `dir`): those whose lock can be
/// taken. Files still being written by a live process stay.
pub(super) fn remove_stale_temp_files(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path)
            && f.try_lock().is_ok()
        {
            let _ = std::fs::remove_file(&path);
        }
    }
}
