//! Flags given an empty value (`--backend "$UNSET"`): refused by every command that has them.
//! A leaf of `cli/`: `info` and the shared device flags both use it.

/// An empty value is a slip (`--backend "$UNSET"`), not a choice: refused with what the flag
/// takes. (In the environment, an empty `WEBGPU_AMP_*` means unset.)
pub fn no_empty_values(flags: &[(&str, Option<&str>)]) -> webgpu_amp::Result<()> {
    for (flag, value) in flags {
        if value.is_some_and(|v| v.trim().is_empty()) {
            let takes = match *flag {
                "--backend" => "vulkan, metal, dx12, gl, webgpu or auto",
                "--adapter" => "part of an adapter's name (webgpu-amp info lists them)",
                "--f16-storage" => "auto, native or packed",
                "--tensor-cores" => "auto, on, on:8x8, on:16x16 or off",
                _ => "a file",
            };
            return Err(webgpu_amp::Error::InvalidArgument(format!(
                "{flag} was given an empty value; it takes {takes}"
            )));
        }
    }
    Ok(())
}
