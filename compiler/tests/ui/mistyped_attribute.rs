kiln::relay_model! {
    fn model(x: Tensor<[2, 3], f32>) -> Tensor<[2, 3], f32> {
        softmax(x, axis = "last")
    }
}
fn main() {}
