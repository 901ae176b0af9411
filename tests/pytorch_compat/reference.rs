//! CPU references written from PyTorch's module definitions (one sample at a time), for the
//! models the state_dict tests load.

/// A PyTorch state_dict: name, shape, f32 values.
pub type StateDict = Vec<(String, Vec<usize>, Vec<f32>)>;

pub fn get<'a>(sd: &'a StateDict, name: &str) -> &'a [f32] {
    &sd.iter().find(|(n, _, _)| n == name).unwrap().2
}

/// `nn.Linear`: y = x W^T + b with W `[out, in]`.
fn linear(x: &[f32], w: &[f32], b: &[f32], out: usize) -> Vec<f32> {
    let inp = x.len();
    (0..out)
        .map(|o| {
            b[o] + (0..inp)
                .map(|i| x[i] as f64 * w[o * inp + i] as f64)
                .sum::<f64>() as f32
        })
        .collect()
}

/// `nn.Conv2d(c, o, k, padding=p)` on `[c, h, w]`, weight `[o, c, k, k]`.
fn conv(
    x: &[f32],
    [c, h, w]: [usize; 3],
    wt: &[f32],
    b: &[f32],
    o: usize,
    k: usize,
    p: usize,
) -> Vec<f32> {
    let (oh, ow) = (h + 2 * p - k + 1, w + 2 * p - k + 1);
    let mut y = vec![0f32; o * oh * ow];
    for oc in 0..o {
        for i in 0..oh {
            for j in 0..ow {
                let mut acc = b[oc] as f64;
                for ic in 0..c {
                    for ki in 0..k {
                        for kj in 0..k {
                            let (yy, xx) = (
                                (i + ki) as isize - p as isize,
                                (j + kj) as isize - p as isize,
                            );
                            if yy < 0 || xx < 0 || yy >= h as isize || xx >= w as isize {
                                continue;
                            }
                            acc += x[ic * h * w + yy as usize * w + xx as usize] as f64
                                * wt[((oc * c + ic) * k + ki) * k + kj] as f64;
                        }
                    }
                }
                y[(oc * oh + i) * ow + j] = acc as f32;
            }
        }
    }
    y
}

fn relu(x: Vec<f32>) -> Vec<f32> {
    x.into_iter().map(|v| v.max(0.0)).collect()
}

/// `nn.MaxPool2d(2)` on `[c, h, w]`.
fn pool2(x: &[f32], c: usize, h: usize, w: usize) -> Vec<f32> {
    let (oh, ow) = (h / 2, w / 2);
    let mut y = vec![0f32; c * oh * ow];
    for ch in 0..c {
        for i in 0..oh {
            for j in 0..ow {
                let at = |di: usize, dj: usize| x[ch * h * w + (2 * i + di) * w + 2 * j + dj];
                y[(ch * oh + i) * ow + j] = at(0, 0).max(at(0, 1)).max(at(1, 0)).max(at(1, 1));
            }
        }
    }
    y
}

pub fn mlp_forward(sd: &StateDict, x: &[f32]) -> Vec<f32> {
    let h = relu(linear(x, get(sd, "1.weight"), get(sd, "1.bias"), 256));
    linear(&h, get(sd, "3.weight"), get(sd, "3.bias"), 10)
}

pub fn mnist_cnn_forward(sd: &StateDict, x: &[f32]) -> Vec<f32> {
    let a = relu(conv(
        x,
        [1, 28, 28],
        get(sd, "conv1.weight"),
        get(sd, "conv1.bias"),
        32,
        3,
        1,
    ));
    let a = pool2(&a, 32, 28, 28);
    let a = relu(conv(
        &a,
        [32, 14, 14],
        get(sd, "conv2.weight"),
        get(sd, "conv2.bias"),
        64,
        3,
        1,
    ));
    let a = pool2(&a, 64, 14, 14);
    // torch.flatten(x, 1): channel-major [64, 7, 7].
    linear(&a, get(sd, "fc.weight"), get(sd, "fc.bias"), 10)
}

pub fn seq_forward(sd: &StateDict, x: &[f32]) -> Vec<f32> {
    let a = relu(conv(
        x,
        [2, 6, 6],
        get(sd, "0.weight"),
        get(sd, "0.bias"),
        3,
        3,
        0,
    ));
    linear(&a, get(sd, "3.weight"), get(sd, "3.bias"), 5)
}
