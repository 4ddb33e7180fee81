/* Runs the seed CNN exported as C (docs/export.md): reads the parameters and one image, in the order the header
 * lists them, as raw float32 from a file, and prints the 10 logits.
 *
 *   cc -O2 -I build/cnn -o build/cnn/cnn examples/export_cnn_main.c build/cnn/apply_model.c -lm
 *   build/cnn/cnn build/cnn/inputs.bin
 */
#include <stdio.h>
#include <stdlib.h>

#include "apply_model.h"

static float *read_floats(FILE *file, size_t count) {
  float *values = malloc(count * sizeof(float));
  if (values == NULL || fread(values, sizeof(float), count, file) != count) {
    fprintf(stderr, "could not read %zu floats\n", count);
    exit(1);
  }
  return values;
}

int main(int argc, char **argv) {
  FILE *file = fopen(argc > 1 ? argv[1] : "inputs.bin", "rb");
  if (file == NULL) {
    perror("inputs");
    return 1;
  }
  float *conv0_bias = read_floats(file, APPLY_MODEL_PARAMS_PARAMS_CONV_0_BIAS_SIZE);
  float *conv0_kernel = read_floats(file, APPLY_MODEL_PARAMS_PARAMS_CONV_0_KERNEL_SIZE);
  float *conv1_bias = read_floats(file, APPLY_MODEL_PARAMS_PARAMS_CONV_1_BIAS_SIZE);
  float *conv1_kernel = read_floats(file, APPLY_MODEL_PARAMS_PARAMS_CONV_1_KERNEL_SIZE);
  float *dense0_bias = read_floats(file, APPLY_MODEL_PARAMS_PARAMS_DENSE_0_BIAS_SIZE);
  float *dense0_kernel = read_floats(file, APPLY_MODEL_PARAMS_PARAMS_DENSE_0_KERNEL_SIZE);
  float *dense1_bias = read_floats(file, APPLY_MODEL_PARAMS_PARAMS_DENSE_1_BIAS_SIZE);
  float *dense1_kernel = read_floats(file, APPLY_MODEL_PARAMS_PARAMS_DENSE_1_KERNEL_SIZE);
  float *images = read_floats(file, APPLY_MODEL_IMAGES_SIZE);
  fclose(file);

  float logits[APPLY_MODEL_OUT_SIZE];
  apply_model(conv0_bias, conv0_kernel, conv1_bias, conv1_kernel, dense0_bias, dense0_kernel, dense1_bias,
              dense1_kernel, images, logits);
  for (int i = 0; i < APPLY_MODEL_OUT_SIZE; i++) printf("%.6f\n", logits[i]);
  return 0;
}
