#pragma once
// Reads what a manifest row needs (frames, display size, fps) from one media file's
// container and stream headers with FFmpeg's libavformat. Video frames are not decoded;
// an image's header is decoded only when its demuxer does not carry the size.
//   frames: the stream header's nb_frames when present, else round(duration x fps), else
//           (or with count_frames) the number of video packets read from the file.
//   size:   rotated by the stream's display matrix (a 90/270 degree phone clip of
//           1920x1080 coded pixels is 1080 wide, 1920 high).
// Thread-safe: files are probed concurrently, one FFmpeg context each.
#include <cstdint>
#include <string>

namespace adaptiveload {

enum class FrameSource { kImage, kHeader, kDuration, kCounted };
const char* frame_source_name(FrameSource s);  // "image", "nb_frames", "duration x fps", "counted"

struct MediaInfo {
  int64_t num_frames = 0;
  int height = 0, width = 0;  // display size, rotation applied
  double fps = 0;             // 0 for images
  bool image = false;
  int rotation = 0;  // clockwise degrees of the display matrix: 0, 90, 180 or 270
  FrameSource frames_from = FrameSource::kHeader;
  std::string format;  // demuxer name, e.g. "mov,mp4,m4a,3gp,3g2,mj2"
};

struct ProbeResult {
  bool ok = false;
  MediaInfo info;
  std::string error;  // why the file has no row (when !ok), one line
};

// Probes one file. Never throws for bad files: unreadable, truncated, corrupt or non-media
// files come back with ok = false and a reason. count_frames: count video packets exactly
// instead of trusting the header (reads the whole file, and so also finds truncation in
// containers without an index).
ProbeResult probe_media(const std::string& path, bool count_frames);

}  // namespace adaptiveload
