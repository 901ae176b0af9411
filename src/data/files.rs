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

/// Reads a whole text file (at most [`file_caps::TEXT_FILE`]), naming it in the error; a pipe
/// that keeps it waiting says so ([`file_caps::read_capped`]).
pub(crate) fn read_text_file(path: &Path) -> Result<Vec<u8>> {
    file_caps::read_capped(path, file_caps::TEXT_FILE).map_err(Error::data)
}
