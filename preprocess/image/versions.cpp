#include <attnzoo/preprocess/image/versions.h>

#include <opencv2/core/utility.hpp>
#include <opencv2/core/version.hpp>

namespace attnzoo {

std::vector<LibraryVersion> image_library_versions() {
  return {{"OpenCV", cv::getVersionString() + " (headers " CV_VERSION ")"}};
}

}  // namespace attnzoo
