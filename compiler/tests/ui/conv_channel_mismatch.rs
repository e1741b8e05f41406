kiln::relay_model! {
    fn model(x: Tensor<[1, 3, 8, 8], f32>) -> Tensor<[1, 4, 8, 8], f32> {
        weight w: [4, 2, 3, 3];
        conv2d(x, w, padding = [1, 1])
    }
}
fn main() {}
