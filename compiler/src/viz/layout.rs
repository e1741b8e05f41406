//! A layered layout of a DAG (the Sugiyama scheme, small): each node on the
//! layer after its deepest producer, nodes within a layer ordered by the
//! mean position of their neighbours (a few sweeps down and up), layers
//! stacked top to bottom and centred. Enough for networks of a few hundred
//! kernels, with no Graphviz to install.

/// Where a node's box goes: top-left corner and size.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Placed {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

impl Placed {
    pub fn center_x(&self) -> f64 {
        self.x + self.w / 2.0
    }
}

/// Horizontal space between boxes of a layer; vertical space between layers.
const GAP_X: f64 = 24.0;
const GAP_Y: f64 = 56.0;
const MARGIN: f64 = 20.0;

/// A laid-out graph: each node's box and layer, and the canvas size.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    pub boxes: Vec<Placed>,
    pub layer: Vec<usize>,
    pub size: (f64, f64),
}

impl Layout {
    /// The rightmost edge of the boxes strictly between two layers (where a
    /// long edge must pass to stay clear of them), if any.
    pub fn right_of_layers_between(&self, from: usize, to: usize) -> Option<f64> {
        let (lo, hi) = (self.layer[from].min(self.layer[to]), self.layer[from].max(self.layer[to]));
        (0..self.boxes.len())
            .filter(|&v| self.layer[v] > lo && self.layer[v] < hi)
            .map(|v| self.boxes[v].x + self.boxes[v].w)
            .reduce(f64::max)
    }
}

/// Boxes of `sizes` (width, height) for nodes whose edges `(from, to)` go
/// from a lower index to a higher one.
pub fn layered(sizes: &[(f64, f64)], edges: &[(usize, usize)]) -> Layout {
    let n = sizes.len();
    let mut layer = vec![0usize; n];
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in edges {
        preds[b].push(a);
        succs[a].push(b);
    }
    // Producers come first in node order, so one pass assigns layers.
    for v in 0..n {
        layer[v] = preds[v].iter().map(|&p| layer[p] + 1).max().unwrap_or(0);
    }
    let layers = layer.iter().max().map_or(0, |&l| l + 1);
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); layers];
    for v in 0..n {
        rows[layer[v]].push(v);
    }
    // Crossing reduction: order each row by the barycentre of its neighbours' positions.
    let mut pos = vec![0f64; n];
    let index = |rows: &Vec<Vec<usize>>, pos: &mut Vec<f64>| {
        for row in rows {
            for (i, &v) in row.iter().enumerate() {
                pos[v] = i as f64;
            }
        }
    };
    index(&rows, &mut pos);
    for sweep in 0..4 {
        let down = sweep % 2 == 0;
        let order: Vec<usize> =
            if down { (1..layers).collect() } else { (0..layers.saturating_sub(1)).rev().collect() };
        for l in order {
            let mut keyed: Vec<(f64, usize)> = rows[l]
                .iter()
                .map(|&v| {
                    let nb = if down { &preds[v] } else { &succs[v] };
                    let key =
                        if nb.is_empty() { pos[v] } else { nb.iter().map(|&u| pos[u]).sum::<f64>() / nb.len() as f64 };
                    (key, v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            rows[l] = keyed.into_iter().map(|(_, v)| v).collect();
            for (i, &v) in rows[l].iter().enumerate() {
                pos[v] = i as f64;
            }
        }
    }
    // Coordinates: rows centred on the widest.
    let row_width = |row: &Vec<usize>| -> f64 {
        row.iter().map(|&v| sizes[v].0).sum::<f64>() + GAP_X * row.len().saturating_sub(1) as f64
    };
    let width = rows.iter().map(row_width).fold(0f64, f64::max) + 2.0 * MARGIN;
    let mut placed = vec![Placed::default(); n];
    let mut y = MARGIN;
    for row in &rows {
        let height = row.iter().map(|&v| sizes[v].1).fold(0f64, f64::max);
        let mut x = (width - row_width(row)) / 2.0;
        for &v in row {
            let (w, h) = sizes[v];
            placed[v] = Placed { x, y: y + (height - h) / 2.0, w, h };
            x += w + GAP_X;
        }
        y += height + GAP_Y;
    }
    Layout { boxes: placed, layer, size: (width, y - GAP_Y + MARGIN) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producers_sit_above_consumers_and_boxes_do_not_overlap() {
        // A diamond with a skip edge: 0 → 1 → 3, 0 → 2 → 3, 0 → 3.
        let sizes = vec![(50.0, 20.0), (80.0, 30.0), (60.0, 20.0), (40.0, 20.0)];
        let edges = vec![(0, 1), (0, 2), (1, 3), (2, 3), (0, 3)];
        let l = layered(&sizes, &edges);
        let (p, (w, h)) = (&l.boxes, l.size);
        for &(a, b) in &edges {
            assert!(p[a].y + p[a].h < p[b].y, "{a} above {b}");
        }
        assert_eq!(p[1].y + p[1].h / 2.0, p[2].y + p[2].h / 2.0, "1 and 2 share a layer");
        let (left, right) = if p[1].x < p[2].x { (p[1], p[2]) } else { (p[2], p[1]) };
        assert!(left.x + left.w <= right.x, "same-layer boxes overlap");
        assert!(p.iter().all(|b| b.x >= 0.0 && b.x + b.w <= w && b.y + b.h <= h));
        // The skip edge 0 → 3 passes right of layer 1's boxes.
        let right = (p[1].x + p[1].w).max(p[2].x + p[2].w);
        assert_eq!(l.right_of_layers_between(0, 3), Some(right));
        assert_eq!(l.right_of_layers_between(0, 1), None);
    }
}
