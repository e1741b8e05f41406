//! YOLOv8 pre- and post-processing as ultralytics does it: letterbox the image
//! into the square input (aspect kept, gray 114 padding), decode the
//! [4 + classes, anchors] output, class-wise non-maximum suppression, boxes
//! mapped back to the original image. Plus a rectangle drawer for the result.

use image::imageops::FilterType;
use image::{Rgb, RgbImage};

/// The network's input side (fixed in `build.rs`).
pub const SIDE: u32 = 320;

/// A box in pixels, corners (x1, y1) top-left and (x2, y2) bottom-right.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Detection {
    pub class: usize,
    pub score: f32,
    pub x1: f32,
    pub y1: f32,
    pub x2: f32,
    pub y2: f32,
}

/// How an image was placed in the square input: input = image * scale + pad.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Letterbox {
    pub scale: f32,
    pub pad_x: f32,
    pub pad_y: f32,
    /// The original image's size, to clamp mapped boxes to.
    pub width: u32,
    pub height: u32,
}

impl Letterbox {
    /// ultralytics' `LetterBox`: scale to fit, center, split the padding as `round(d ∓ 0.1)`.
    pub fn fit(width: u32, height: u32) -> (Letterbox, u32, u32) {
        let scale = (SIDE as f32 / width as f32).min(SIDE as f32 / height as f32);
        let (nw, nh) =
            (((width as f32 * scale).round() as u32).max(1), ((height as f32 * scale).round() as u32).max(1));
        let (dw, dh) = ((SIDE - nw) as f32 / 2.0, (SIDE - nh) as f32 / 2.0);
        let (left, top) = ((dw - 0.1).round(), (dh - 0.1).round());
        (Letterbox { scale, pad_x: left, pad_y: top, width, height }, nw, nh)
    }

    /// A box in input pixels back in the original image's, clamped to it.
    pub fn unmap(&self, d: Detection) -> Detection {
        let x = |v: f32| ((v - self.pad_x) / self.scale).clamp(0.0, self.width as f32);
        let y = |v: f32| ((v - self.pad_y) / self.scale).clamp(0.0, self.height as f32);
        Detection { x1: x(d.x1), y1: y(d.y1), x2: x(d.x2), y2: y(d.y2), ..d }
    }
}

/// The image letterboxed into the network's input: [1, 3, 320, 320] f32, RGB in [0, 1], NCHW.
pub fn letterbox(img: &RgbImage) -> (Vec<f32>, Letterbox) {
    let (lb, nw, nh) = Letterbox::fit(img.width(), img.height());
    let resized = image::imageops::resize(img, nw, nh, FilterType::Triangle);
    let mut canvas = RgbImage::from_pixel(SIDE, SIDE, Rgb([114; 3]));
    image::imageops::replace(&mut canvas, &resized, lb.pad_x as i64, lb.pad_y as i64);
    let side = SIDE as usize;
    let mut x = vec![0f32; 3 * side * side];
    for (px, py, p) in canvas.enumerate_pixels() {
        for c in 0..3 {
            x[(c * side + py as usize) * side + px as usize] = f32::from(p[c]) / 255.0;
        }
    }
    (x, lb)
}

/// The candidates of output `out` ([4 + classes, anchors], row-major): per
/// anchor its best class, kept when its score (already a sigmoid) reaches `threshold`.
pub fn decode(out: &[f32], classes: usize, threshold: f32) -> Vec<Detection> {
    let anchors = out.len() / (4 + classes);
    let at = |row: usize, a: usize| out[row * anchors + a];
    (0..anchors)
        .filter_map(|a| {
            let (class, score) =
                (0..classes).map(|c| (c, at(4 + c, a))).max_by(|p, q| p.1.total_cmp(&q.1)).expect("some class");
            // Boxes are center, width, height in input pixels.
            let (cx, cy, w, h) = (at(0, a), at(1, a), at(2, a), at(3, a));
            (score >= threshold).then_some(Detection {
                class,
                score,
                x1: cx - w / 2.0,
                y1: cy - h / 2.0,
                x2: cx + w / 2.0,
                y2: cy + h / 2.0,
            })
        })
        .collect()
}

pub fn iou(a: &Detection, b: &Detection) -> f32 {
    let (w, h) = ((a.x2.min(b.x2) - a.x1.max(b.x1)).max(0.0), (a.y2.min(b.y2) - a.y1.max(b.y1)).max(0.0));
    let inter = w * h;
    let area = |d: &Detection| (d.x2 - d.x1).max(0.0) * (d.y2 - d.y1).max(0.0);
    let union = area(a) + area(b) - inter;
    if union > 0.0 {
        inter / union
    } else {
        0.0
    }
}

/// Class-wise non-maximum suppression: best first, a box is dropped when it
/// overlaps a kept box of the same class by more than `iou_threshold`.
pub fn nms(mut dets: Vec<Detection>, iou_threshold: f32) -> Vec<Detection> {
    dets.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut kept: Vec<Detection> = Vec::new();
    for d in dets {
        if kept.iter().all(|k| k.class != d.class || iou(k, &d) <= iou_threshold) {
            kept.push(d);
        }
    }
    kept
}

/// The outline of `d`, `thickness` pixels wide inward, clipped to the image.
pub fn draw_box(img: &mut RgbImage, d: &Detection, color: Rgb<u8>, thickness: u32) {
    let (w, h) = img.dimensions();
    if w == 0 || h == 0 {
        return;
    }
    let clamp = |v: f32, max: u32| (v.max(0.0) as u32).min(max - 1);
    let (x1, y1, x2, y2) = (clamp(d.x1, w), clamp(d.y1, h), clamp(d.x2, w), clamp(d.y2, h));
    for y in y1..=y2 {
        for x in x1..=x2 {
            let edge = x - x1 < thickness || x2 - x < thickness || y - y1 < thickness || y2 - y < thickness;
            if edge {
                img.put_pixel(x, y, color);
            }
        }
    }
}

/// A distinct color per class.
pub fn color(class: usize) -> Rgb<u8> {
    const PALETTE: [[u8; 3]; 6] =
        [[255, 56, 56], [50, 205, 50], [0, 120, 255], [255, 178, 29], [207, 0, 255], [0, 212, 187]];
    Rgb(PALETTE[class % PALETTE.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn det(class: usize, score: f32, x1: f32, y1: f32, x2: f32, y2: f32) -> Detection {
        Detection { class, score, x1, y1, x2, y2 }
    }

    #[test]
    fn nms_keeps_the_best_of_each_overlapping_group_per_class() {
        let dets = vec![
            det(0, 0.6, 12.0, 10.0, 52.0, 50.0), // IoU 0.90 with the 0.9 box: dropped
            det(0, 0.9, 10.0, 10.0, 50.0, 50.0),
            det(1, 0.5, 10.0, 10.0, 50.0, 50.0), // same place, other class: kept
            det(0, 0.7, 40.0, 40.0, 80.0, 80.0), // IoU 0.03: kept
            det(0, 0.3, 100.0, 100.0, 110.0, 110.0),
        ];
        let kept = nms(dets, 0.45);
        let scores: Vec<f32> = kept.iter().map(|d| d.score).collect();
        assert_eq!(scores, [0.9, 0.7, 0.5, 0.3]);
        assert!((iou(&det(0, 1.0, 0.0, 0.0, 2.0, 2.0), &det(0, 1.0, 1.0, 0.0, 3.0, 2.0)) - 1.0 / 3.0).abs() < 1e-6);
    }

    #[test]
    fn decode_reads_rows_per_anchor() {
        // 2 classes, 3 anchors: rows cx, cy, w, h, score0, score1.
        #[rustfmt::skip]
        let out = [
            10.0, 20.0, 30.0,
            10.0, 20.0, 30.0,
            4.0, 4.0, 4.0,
            2.0, 2.0, 2.0,
            0.9, 0.1, 0.2,
            0.1, 0.8, 0.24,
        ];
        let d = decode(&out, 2, 0.25);
        assert_eq!(d, [det(0, 0.9, 8.0, 9.0, 12.0, 11.0), det(1, 0.8, 18.0, 19.0, 22.0, 21.0)]);
    }

    #[test]
    fn letterbox_maps_boxes_back_to_the_original_image() {
        // 640x360 → scale 0.5, 320x180 centered: 70 rows of padding above.
        let (lb, nw, nh) = Letterbox::fit(640, 360);
        assert_eq!((lb.scale, lb.pad_x, lb.pad_y, nw, nh), (0.5, 0.0, 70.0, 320, 180));
        let back = lb.unmap(det(3, 0.5, 10.0, 80.0, 110.0, 170.0));
        assert_eq!(back, det(3, 0.5, 20.0, 20.0, 220.0, 200.0));
        // Parts in the padding are clamped to the image.
        assert_eq!(lb.unmap(det(0, 0.5, -5.0, 0.0, 330.0, 320.0)), det(0, 0.5, 0.0, 0.0, 640.0, 360.0));
        // Portrait: padding left and right.
        let (lb, nw, nh) = Letterbox::fit(100, 200);
        assert_eq!((lb.scale, lb.pad_x, lb.pad_y, nw, nh), (1.6, 80.0, 0.0, 160, 320));

        let img = RgbImage::from_pixel(640, 360, Rgb([255, 0, 0]));
        let (x, _) = letterbox(&img);
        let side = SIDE as usize;
        assert_eq!(x.len(), 3 * side * side);
        assert_eq!(x[0], 114.0 / 255.0, "padding is gray 114");
        assert_eq!((x[160 * side + 160], x[side * side + 160 * side + 160]), (1.0, 0.0), "red inside");
    }

    #[test]
    fn boxes_are_outlines_clipped_to_the_image() {
        let mut img = RgbImage::new(20, 10);
        let red = Rgb([255, 0, 0]);
        draw_box(&mut img, &det(0, 1.0, 2.0, 2.0, 30.0, 7.0), red, 1);
        assert_eq!(*img.get_pixel(2, 5), red);
        assert_eq!(*img.get_pixel(19, 5), red, "right edge clipped to the last column");
        assert_eq!(*img.get_pixel(10, 2), red);
        assert_eq!(*img.get_pixel(10, 5), Rgb([0, 0, 0]), "inside untouched");
        assert_eq!(*img.get_pixel(1, 1), Rgb([0, 0, 0]));
    }
}
