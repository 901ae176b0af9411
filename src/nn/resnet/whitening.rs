//! airbench's whitening conv, initialised from the data (`init_whitening_conv` in
//! `airbench94.py`): the 2×2 patches of the first training images, their (uncentred)
//! covariance, its eigenvectors scaled by `1/sqrt(eigenvalue + eps)` in descending order of
//! eigenvalue, then the same rows negated: 24 filters of 3×2×2. On the host, in f64, with a
//! cyclic Jacobi eigensolver: the same bits on every machine. Eigenvectors are defined up to
//! sign (PyTorch's `eigh` picks one by its LAPACK's rules); here each has its largest entry
//! positive, which with its negated twin beside it is the same pair of filters.

/// Images airbench takes the patches from (`train_images[:5000]`).
pub const WHITEN_IMAGES: usize = 5000;
/// airbench's `eps` in `1/sqrt(eigenvalue + eps)`.
pub const WHITEN_EPS: f64 = 5e-4;

/// The whitening weight `[2·C·4, C, 2, 2]` (row-major) from `images`, each `[C, H, W]`
/// (`sample_len` = C·H·W values, normalised as training sees them).
pub fn whitening_weight(images: &[f32], (c, h, w): (usize, usize, usize)) -> Vec<f32> {
    let d = c * 4;
    let mut cov = vec![0f64; d * d];
    let mut patches = 0usize;
    let mut patch = vec![0f64; d];
    for image in images.chunks_exact(c * h * w) {
        for y in 0..h - 1 {
            for x in 0..w - 1 {
                for ch in 0..c {
                    for (k, (dy, dx)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate() {
                        patch[ch * 4 + k] = f64::from(image[(ch * h + y + dy) * w + x + dx]);
                    }
                }
                for i in 0..d {
                    for j in i..d {
                        cov[i * d + j] += patch[i] * patch[j];
                    }
                }
                patches += 1;
            }
        }
    }
    for i in 0..d {
        for j in i..d {
            cov[i * d + j] /= patches.max(1) as f64;
            cov[j * d + i] = cov[i * d + j];
        }
    }
    let (values, vectors) = symmetric_eigen(cov, d);
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
    let mut weight = vec![0f32; 2 * d * d];
    for (row, &k) in order.iter().enumerate() {
        let v: Vec<f64> = (0..d).map(|i| vectors[i * d + k]).collect();
        let largest = v
            .iter()
            .copied()
            .fold(0f64, |m, x| if x.abs() > m.abs() { x } else { m });
        let sign = if largest < 0.0 { -1.0 } else { 1.0 };
        let scale = sign / (values[k].max(0.0) + WHITEN_EPS).sqrt();
        for i in 0..d {
            weight[row * d + i] = (v[i] * scale) as f32;
            weight[(d + row) * d + i] = (-v[i] * scale) as f32;
        }
    }
    weight
}

/// Eigenvalues and eigenvectors (column k of the row-major `d`×`d` result) of the symmetric
/// matrix `a`, by cyclic Jacobi rotations until the off-diagonal part is negligible.
fn symmetric_eigen(mut a: Vec<f64>, d: usize) -> (Vec<f64>, Vec<f64>) {
    let mut v = vec![0f64; d * d];
    for i in 0..d {
        v[i * d + i] = 1.0;
    }
    for _sweep in 0..100 {
        let off: f64 = (0..d)
            .flat_map(|i| (0..d).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i * d + j] * a[i * d + j])
            .sum();
        let diag: f64 = (0..d).map(|i| a[i * d + i] * a[i * d + i]).sum();
        if off <= 1e-30 * diag.max(f64::MIN_POSITIVE) {
            break;
        }
        for p in 0..d {
            for q in p + 1..d {
                let apq = a[p * d + q];
                if apq == 0.0 {
                    continue;
                }
                let theta = (a[q * d + q] - a[p * d + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..d {
                    let (akp, akq) = (a[k * d + p], a[k * d + q]);
                    a[k * d + p] = c * akp - s * akq;
                    a[k * d + q] = s * akp + c * akq;
                }
                for k in 0..d {
                    let (apk, aqk) = (a[p * d + k], a[q * d + k]);
                    a[p * d + k] = c * apk - s * aqk;
                    a[q * d + k] = s * apk + c * aqk;
                }
                for k in 0..d {
                    let (vkp, vkq) = (v[k * d + p], v[k * d + q]);
                    v[k * d + p] = c * vkp - s * vkq;
                    v[k * d + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    ((0..d).map(|i| a[i * d + i]).collect(), v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filters whiten: over the same patches, the first 12 outputs are uncorrelated with
    /// variance λ/(λ + eps), and the Jacobi solver's eigenpairs satisfy A v = λ v.
    #[test]
    fn the_weight_whitens_the_patches() {
        let (c, h, w) = (3, 5, 6);
        let mut state = 12345u64;
        let images: Vec<f32> = (0..4 * c * h * w)
            .map(|i| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let noise = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                // Correlated channels and neighbours: something to whiten.
                noise + 0.5 * ((i % (w * h)) as f32 / 7.0).sin()
            })
            .collect();
        let weight = whitening_weight(&images, (c, h, w));
        let d = 12;
        // The outputs' second moments over every patch.
        let mut moments = vec![0f64; d * d];
        let mut n = 0.0;
        for image in images.chunks_exact(c * h * w) {
            for y in 0..h - 1 {
                for x in 0..w - 1 {
                    let patch: Vec<f64> = (0..d)
                        .map(|i| {
                            let (ch, k) = (i / 4, i % 4);
                            f64::from(image[(ch * h + y + k / 2) * w + x + k % 2])
                        })
                        .collect();
                    let out: Vec<f64> = (0..d)
                        .map(|r| {
                            (0..d)
                                .map(|i| f64::from(weight[r * d + i]) * patch[i])
                                .sum()
                        })
                        .collect();
                    for r in 0..d {
                        for s in 0..d {
                            moments[r * d + s] += out[r] * out[s];
                        }
                    }
                    n += 1.0;
                }
            }
        }
        for r in 0..d {
            for s in 0..d {
                let m = moments[r * d + s] / n;
                if r == s {
                    assert!(m > 0.0 && m <= 1.0 + 1e-5, "variance {r}: {m}");
                } else {
                    assert!(m.abs() < 1e-5, "covariance {r},{s}: {m}");
                }
            }
        }
        // The negated twins.
        for i in 0..d * d {
            assert_eq!(weight[d * d + i], -weight[i]);
        }
    }
}
