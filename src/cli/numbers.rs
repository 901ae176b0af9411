//! Numeric flags: how a value that is not a number of the flag's type (`-1` for a count,
//! digits past 64 bits, `ten`, an empty value) is refused, with the flag's range in the
//! message as an out-of-range number gets it. Ranges themselves are checked in one place
//! per surface: a run's in the library's run builder ([`Setting::range`]), the others in
//! their subcommand's check (each in the words of `RANGE` constants beside it).

use std::str::FromStr;

use webgpu_amp::train::Setting;

/// A parser for a flag whose values are `range` (words; the message when the text does
/// not parse as a `T`). The value's range is checked later, where the range lives.
pub fn number<T>(range: &'static str) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: FromStr,
{
    move |text: &str| {
        text.parse::<T>()
            .map_err(|_| format!("must be {range}, got `{text}`"))
    }
}

/// [`number`] for a run setting: its range is [`Setting::range`].
pub fn setting<T>(setting: Setting) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: FromStr,
{
    number(setting.range())
}
