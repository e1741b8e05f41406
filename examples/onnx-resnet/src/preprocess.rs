//! ImageNet preprocessing as torchvision does it for ResNet
//! (`Resize(256)`, `CenterCrop(224)`, `ToTensor()`, `Normalize(mean, std)`),
//! so that a network trained in PyTorch sees what it was trained on.

use image::imageops::FilterType;
use image::RgbImage;

/// The side of the network's input.
pub const SIDE: usize = 224;
/// The shorter side after the resize, before the center crop.
const RESIZE: u32 = 256;
/// ImageNet's per-channel mean and standard deviation (RGB, on values in [0, 1]).
pub const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const STD: [f32; 3] = [0.229, 0.224, 0.225];

/// The start of a centered window of `crop` in `len`, rounded as Python's `round` (half to even).
fn center(len: u32, crop: u32) -> u32 {
    (f64::from(len - crop) / 2.0).round_ties_even() as u32
}

/// Shorter side to 256 (antialiased bilinear, as PIL's resize), then the central 224×224.
pub fn resize_and_crop(img: &RgbImage) -> RgbImage {
    let (w, h) = img.dimensions();
    // torchvision truncates the longer side: int(256 * long / short).
    let (nw, nh) = if w <= h {
        (RESIZE, (u64::from(RESIZE) * u64::from(h) / u64::from(w)) as u32)
    } else {
        ((u64::from(RESIZE) * u64::from(w) / u64::from(h)) as u32, RESIZE)
    };
    let resized = image::imageops::resize(img, nw, nh, FilterType::Triangle);
    let side = SIDE as u32;
    image::imageops::crop_imm(&resized, center(nw, side), center(nh, side), side, side).to_image()
}

/// The network's input: [1, 3, 224, 224] f32, NCHW, normalized per channel.
pub fn to_tensor(img: &RgbImage) -> Vec<f32> {
    let crop = resize_and_crop(img);
    let mut x = vec![0f32; 3 * SIDE * SIDE];
    for (px, py, p) in crop.enumerate_pixels() {
        for c in 0..3 {
            let v = f32::from(p[c]) / 255.0;
            x[(c * SIDE + py as usize) * SIDE + px as usize] = (v - MEAN[c]) / STD[c];
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchvision_geometry() {
        // 4:3 landscape: 256 high, int(256 * 4 / 3) = 341 wide, crop at x = round(58.5) = 58.
        assert_eq!(center(341, 224), 58);
        assert_eq!(center(256, 224), 16);
        for (w, h) in [(200, 150), (150, 200), (224, 224), (1000, 30)] {
            assert_eq!(resize_and_crop(&RgbImage::new(w, h)).dimensions(), (224, 224), "{w}x{h}");
        }
    }

    #[test]
    fn uniform_images_normalize_per_channel() {
        for (value, pixel) in [(1.0f32, 255u8), (0.0, 0)] {
            let x = to_tensor(&RgbImage::from_pixel(300, 180, image::Rgb([pixel; 3])));
            for c in 0..3 {
                let want = (value - MEAN[c]) / STD[c];
                let plane = &x[c * SIDE * SIDE..(c + 1) * SIDE * SIDE];
                assert!(plane.iter().all(|&v| (v - want).abs() < 1e-6), "channel {c}: want {want}");
            }
        }
    }
}
