//! Integer tensors of a safetensors file, in any width and signedness PyTorch writes, as u32
//! (class labels, token ids), with range checks.

use safetensors::Dtype;
use safetensors::tensor::TensorView;

/// Whether `dtype` is one of the integer dtypes PyTorch writes.
pub(super) fn is_integer(dtype: Dtype) -> bool {
    matches!(
        dtype,
        Dtype::U8
            | Dtype::I8
            | Dtype::I16
            | Dtype::U16
            | Dtype::I32
            | Dtype::U32
            | Dtype::I64
            | Dtype::U64
    )
}

/// The integers of `view` (the file's tensor `tensor`) as u32. Element `i` with value `v`
/// below 0 is the error `negative(i, v)`, above u32::MAX `too_large(i, v)`.
pub(super) fn to_u32(
    view: &TensorView<'_>,
    tensor: &str,
    negative: impl Fn(usize, i128) -> String,
    too_large: impl Fn(usize, i128) -> String,
) -> std::result::Result<Vec<u32>, String> {
    let convert = |width: usize, to_i128: &dyn Fn(&[u8]) -> i128| {
        view.data()
            .chunks_exact(width)
            .enumerate()
            .map(|(i, chunk)| {
                let v = to_i128(chunk);
                if v < 0 {
                    Err(negative(i, v))
                } else {
                    u32::try_from(v).map_err(|_| too_large(i, v))
                }
            })
            .collect()
    };
    let word = |b: &[u8]| -> [u8; 8] {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        w
    };
    match view.dtype() {
        Dtype::U8 => convert(1, &|b| b[0] as i128),
        Dtype::I8 => convert(1, &|b| b[0] as i8 as i128),
        Dtype::I16 => convert(2, &|b| i16::from_le_bytes([b[0], b[1]]) as i128),
        Dtype::U16 => convert(2, &|b| u16::from_le_bytes([b[0], b[1]]) as i128),
        Dtype::I32 => convert(4, &|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i128),
        Dtype::U32 => convert(4, &|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i128),
        Dtype::I64 => convert(8, &|b| i64::from_le_bytes(word(b)) as i128),
        Dtype::U64 => convert(8, &|b| u64::from_le_bytes(word(b)) as i128),
        other => Err(format!(
            "`{tensor}` has dtype {other:?}, not an integer dtype"
        )),
    }
}
