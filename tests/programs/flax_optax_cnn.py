"""flax + optax: a small CNN trained for a few steps on random data."""
import jax
import jax.numpy as jnp
import optax
from flax import linen as nn


class CNN(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.Conv(features=8, kernel_size=(3, 3))(x)
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = nn.Conv(features=8, kernel_size=(3, 3))(x)
    x = nn.relu(x)
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(features=10)(x)


key = jax.random.PRNGKey(0)
k_init, k_x, k_y = jax.random.split(key, 3)
images = jax.random.normal(k_x, (16, 12, 12, 1))
labels = jax.random.randint(k_y, (16,), 0, 10)

model = CNN()
params = model.init(k_init, images)["params"]
optimizer = optax.adam(1e-2)
opt_state = optimizer.init(params)


@jax.jit
def train_step(params, opt_state, images, labels):
  def loss_fn(params):
    logits = model.apply({"params": params}, images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
  loss, grads = jax.value_and_grad(loss_fn)(params)
  updates, opt_state = optimizer.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, loss


print("parameters:", sum(p.size for p in jax.tree_util.tree_leaves(params)))
for step in range(8):
  params, opt_state, loss = train_step(params, opt_state, images, labels)
  if step % 2 == 0:
    print(f"step {step}: loss {float(loss):.3f}")
accuracy = jnp.mean(jnp.argmax(model.apply({"params": params}, images), axis=-1) == labels)
print(f"train accuracy: {float(accuracy):.3f}")
