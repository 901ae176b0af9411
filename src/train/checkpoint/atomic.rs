//! Atomic file writes: a temp file beside the target, fsync, rename; and the clean-up of
//! temp files that killed writers left behind. A write that fails at any stage (a full
//! disk included) removes its temp file and leaves the target as it was.

use std::io::{ErrorKind, Write};
use std::path::Path;

use super::disk_full::{self, Fault};
use super::save_target::{parent_dir, resolve_save_target, temp_prefix, temp_suffix};
use crate::error::{Error, Result};
use crate::gpu::human_bytes;

/// Write `bytes` to `path` atomically: a crash at any point leaves either the old file or
/// the new one, never a torn one; a symlink to a regular file is written through. `save_needs` is what the whole save writes (this file
/// and, for a checkpoint, its moments file), for the message when the disk is full.
/// `before_rename` runs on the synced temp file (the save test hook).
pub(super) fn write_atomic(
    path: &Path,
    bytes: &[u8],
    save_needs: u64,
    before_rename: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    // Only ever onto a regular file or a new path (a rename would replace a device node).
    let path = &resolve_save_target(path, "save to")?;
    let dir = parent_dir(path);
    let fault = disk_full::fault_for_next_write()?;
    let prefix = temp_prefix(path);
    let tmp = dir.join(format!("{prefix}{}", temp_suffix()));
    let existed = path.symlink_metadata().is_ok();
    let failed = |stage: &str, e: std::io::Error, written: usize| {
        let _ = std::fs::remove_file(&tmp);
        let kept = if existed {
            "the file there is unchanged"
        } else {
            "no file was created there"
        };
        // Out of space: say how much the save needed, the figure a user must free.
        let needs = match e.kind() {
            ErrorKind::StorageFull | ErrorKind::QuotaExceeded | ErrorKind::FileTooLarge => {
                format!(
                    "; the save needs {save_needs} bytes ({}) free",
                    human_bytes(save_needs)
                )
            }
            _ => String::new(),
        };
        Error::Checkpoint(format!(
            "{}: {stage}: {e} ({written} of its {} bytes written){needs}; {kept} and the temp \
             file is removed",
            path.display(),
            bytes.len(),
        ))
    };
    // The temp file stays locked until it is renamed: a lock a later save can take
    // belongs to a writer that died (the OS drops locks with the process).
    let mut f = std::fs::File::create(&tmp).map_err(|e| failed("creating a temp file", e, 0))?;
    let _ = f.try_lock();
    let limit = match fault {
        Some(Fault::AtByte(n)) => usize::try_from(n).unwrap_or(usize::MAX).min(bytes.len()),
        _ => bytes.len(),
    };
    let written = write_counted(&mut f, &bytes[..limit]);
    let written = match (written, fault) {
        (Err((e, n)), _) => Err((e, n)),
        (Ok(n), Some(Fault::AtByte(_))) => Err((disk_full::no_space(), n)),
        (Ok(n), _) => Ok(n),
    };
    if let Err((e, n)) = written {
        drop(f);
        return Err(failed("writing", e, n));
    }
    if let Err(e) = f.sync_all() {
        drop(f);
        return Err(failed("syncing", e, bytes.len()));
    }
    if let Err(e) = before_rename(&tmp) {
        drop(f);
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let renamed = match fault {
        Some(Fault::Rename) => Err(disk_full::no_space()),
        _ => std::fs::rename(&tmp, path),
    };
    drop(f);
    renamed.map_err(|e| failed("renaming into place", e, bytes.len()))?;
    remove_stale_temp_files(dir, &prefix);
    // Make the rename itself durable.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// `write_all` that says how many bytes made it before an error.
fn write_counted(
    f: &mut std::fs::File,
    bytes: &[u8],
) -> std::result::Result<usize, (std::io::Error, usize)> {
    let mut done = 0;
    while done < bytes.len() {
        match f.write(&bytes[done..]) {
            Ok(0) => return Err((ErrorKind::WriteZero.into(), done)),
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err((e, done)),
        }
    }
    Ok(done)
}

/// Deletes temp files of killed writers (`{prefix}{pid}-{n}` in `dir`): those whose writer
/// is no longer running and whose lock can be taken. A live writer's file stays, also in
/// the moment between its creation and its lock (two trains saving to one path once lost a
/// temp file so).
pub(super) fn remove_stale_temp_files(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(process_is_running) {
            continue;
        }
        if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path)
            && f.try_lock().is_ok()
        {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Whether a process with this id runs (this one included). Where that cannot be asked,
/// the file lock alone decides.
fn process_is_running(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: kill(2) with signal 0 sends nothing; it only checks the process exists.
        let rc = unsafe { libc::kill(pid, 0) };
        rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

/// Writes a report file (`compare`'s JSON and chart) atomically, as checkpoints are: the
/// target checked again, a temp file, fsync, rename; a failed write leaves the old file.
/// Its failures name the flag (`what`), not a checkpoint.
pub fn save_file(path: &Path, bytes: &[u8], what: &str) -> Result<()> {
    let target = resolve_save_target(path, what)?;
    write_atomic(&target, bytes, bytes.len() as u64, |_| Ok(())).map_err(|e| match e {
        Error::Checkpoint(m) => Error::Output(format!("{what} {m}")),
        e => e,
    })
}
