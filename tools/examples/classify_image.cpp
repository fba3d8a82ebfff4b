// Classifies images with a model of the zoo: the README's C++ example, built against an installed
// attnzoo (CMakeLists.txt beside it; README "Use attnzoo from your project").
//
//   classify_image vit_digits $PREFIX/share/attnzoo/weights/vit_digits.safetensors digit.png
//   classify_image vit_b_16 vit_b_16-c867db91.pth cat.jpg           # torchvision's checkpoint
//   classify_image ./vit-base-patch16-224/ - cat.jpg                 # a Hugging Face folder
//
// The model is a name of the zoo (found at run time: configs/zoo_path.h), a YAML file or a model
// folder; its config brings the preprocessing (resize, crop, mean, std) and the labels. WEIGHTS
// "-" takes the model folder's own weights (random ones for a name or YAML without any).
#include <attnzoo/api/image_classifier.h>

#include <cstdio>
#include <exception>
#include <string>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL WEIGHTS|- IMAGE...\n", argv[0]);
    return 2;
  }
  try {
    attnzoo::ImageClassifierOptions options;
    if (std::string(argv[2]) != "-") options.weights = argv[2];
    const attnzoo::ImageClassifier classifier(argv[1], options);
    for (int i = 3; i < argc; ++i) {
      std::printf("%s\n", argv[i]);
      for (const auto& p : classifier.classify(argv[i], /*topk=*/5)) {
        std::printf("  %8.4f%%  %s\n", 100.0 * p.probability, p.label.c_str());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "classify_image: %s\n", e.what());
    return 1;
  }
  return 0;
}
