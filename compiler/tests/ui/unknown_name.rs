kiln::relay_model! {
    fn model(x: Tensor<[2, 3], f32>) -> Tensor<[2, 3], f32> {
        weight w: [2, 3];
        x + v
    }
}
fn main() {}
