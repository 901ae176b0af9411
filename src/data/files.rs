//! The data directory fetched sets live in, and reading its files with errors that say what
//! to do.

use std::path::{Path, PathBuf};

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

/// Reads a whole file, naming it in the error.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::data(format!("{}: cannot read: {e}", path.display())))
}
