#include "scan/probe.h"

#include <cmath>
#include <cstdarg>
#include <cstring>
#include <mutex>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/display.h>
#include <libavutil/error.h>
}

namespace adaptiveload {
namespace {

// FFmpeg reports the precise reason ("moov atom not found") only through its log; the
// return code says "Invalid data found". Keep the last error line of this thread so the
// errors file can say both, and print nothing on stderr (the progress bar owns it).
thread_local std::string t_last_log;

void log_callback(void*, int level, const char* fmt, va_list vl) {
  if (level > AV_LOG_ERROR) return;
  char line[512];
  int print_prefix = 0;  // no "[demuxer @ 0x...]": addresses would make the errors file vary
  av_log_format_line2(nullptr, level, fmt, vl, line, sizeof line, &print_prefix);
  std::string s(line);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  if (!s.empty()) t_last_log = s;
}

void init_ffmpeg() {
  static std::once_flag once;
  std::call_once(once, [] {
    av_log_set_level(AV_LOG_ERROR);
    av_log_set_callback(log_callback);
  });
}

std::string av_error(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, buf, sizeof buf);
  std::string s = buf;
  if (!t_last_log.empty() && t_last_log != s) s += " (" + t_last_log + ")";
  return s;
}

ProbeResult fail(std::string why) {
  ProbeResult r;
  r.error = std::move(why);
  return r;
}

struct InputCloser {
  AVFormatContext* ctx = nullptr;
  ~InputCloser() {
    if (ctx) avformat_close_input(&ctx);
  }
};

bool ends_with(const char* s, const char* suffix) {
  size_t n = std::strlen(s), m = std::strlen(suffix);
  return n >= m && std::strcmp(s + n - m, suffix) == 0;
}

// Still-image demuxers: image2 (by extension) and the content-probed *_pipe ones
// (png_pipe, jpeg_pipe, webp_pipe, bmp_pipe, ...).
bool is_image_demuxer(const AVInputFormat* f) {
  return std::strcmp(f->name, "image2") == 0 || ends_with(f->name, "_pipe");
}

int find_video_stream(const AVFormatContext* fmt) {
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const AVStream* st = fmt->streams[i];
    if (st->codecpar->codec_type == AVMEDIA_TYPE_VIDEO &&
        !(st->disposition & AV_DISPOSITION_ATTACHED_PIC))
      return int(i);
  }
  return -1;
}

double stream_fps(const AVStream* st) {
  for (AVRational q : {st->avg_frame_rate, st->r_frame_rate})
    if (q.num > 0 && q.den > 0) return av_q2d(q);
  return 0;
}

// Clockwise rotation in degrees (0, 90, 180, 270) from the display matrix side data.
int stream_rotation(const AVStream* st) {
  const uint8_t* matrix = nullptr;
#if LIBAVCODEC_VERSION_INT >= AV_VERSION_INT(60, 29, 100)
  const AVPacketSideData* sd = av_packet_side_data_get(
      st->codecpar->coded_side_data, st->codecpar->nb_coded_side_data, AV_PKT_DATA_DISPLAYMATRIX);
  if (sd && sd->size >= 9 * 4) matrix = sd->data;
#else
  size_t size = 0;
  matrix = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
  if (size < 9 * 4) matrix = nullptr;
#endif
  if (!matrix) return 0;
  double ccw = av_display_rotation_get(reinterpret_cast<const int32_t*>(matrix));
  if (std::isnan(ccw)) return 0;
  long cw = std::lround(-ccw / 90.0) * 90;  // the matrix can carry rounding noise
  return int(((cw % 360) + 360) % 360);
}

// Counts the video stream's packets; an error or a corrupt packet before the end means a
// damaged file. Returns -1 and sets `why` on failure.
int64_t count_packets(AVFormatContext* fmt, int stream, std::string& why) {
  AVPacket* pkt = av_packet_alloc();
  if (!pkt) {
    why = "out of memory";
    return -1;
  }
  int64_t n = 0;
  for (;;) {
    int r = av_read_frame(fmt, pkt);
    if (r == AVERROR_EOF) break;
    if (r < 0) {
      why = "read error after " + std::to_string(n) + " video packets: " + av_error(r);
      n = -1;
      break;
    }
    bool corrupt = pkt->flags & AV_PKT_FLAG_CORRUPT;
    if (pkt->stream_index == stream) ++n;
    av_packet_unref(pkt);
    if (corrupt) {
      why = "corrupt packet after " + std::to_string(n) +
            " video packets (truncated or damaged file)";
      n = -1;
      break;
    }
  }
  av_packet_free(&pkt);
  return n;
}

}  // namespace

const char* frame_source_name(FrameSource s) {
  switch (s) {
    case FrameSource::kImage:
      return "image";
    case FrameSource::kHeader:
      return "nb_frames";
    case FrameSource::kDuration:
      return "duration x fps";
    case FrameSource::kCounted:
      return "counted";
  }
  return "?";
}

ProbeResult probe_media(const std::string& path, bool count_frames) {
  init_ffmpeg();
  t_last_log.clear();
  InputCloser in;
  // Local files only: a playlist or concat list must not make the scan open URLs.
  AVDictionary* opts = nullptr;
  av_dict_set(&opts, "protocol_whitelist", "file", 0);
  int r = avformat_open_input(&in.ctx, path.c_str(), nullptr, &opts);
  av_dict_free(&opts);
  if (r < 0) return fail("not readable as media: " + av_error(r));
  AVFormatContext* fmt = in.ctx;
  if (std::strcmp(fmt->iformat->name, "tty") == 0)
    return fail("text file (FFmpeg's tty demuxer would render it as ANSI art), not media");

  MediaInfo info;
  info.format = fmt->iformat->name;
  info.image = is_image_demuxer(fmt->iformat);
  int vs = find_video_stream(fmt);
  auto incomplete = [&] {
    if (vs < 0) return true;
    const AVStream* st = fmt->streams[vs];
    return st->codecpar->width <= 0 || st->codecpar->height <= 0 ||
           (!info.image && stream_fps(st) <= 0);
  };
  if (incomplete()) {
    // The header lacks the size or rate (image pipes, some streams): let FFmpeg read ahead
    // (and decode an image's header).
    t_last_log.clear();
    r = avformat_find_stream_info(fmt, nullptr);
    if (r < 0) return fail("cannot read stream parameters: " + av_error(r));
    vs = find_video_stream(fmt);
  }
  if (vs < 0) return fail("no video or image stream (" + info.format + ")");
  AVStream* st = fmt->streams[vs];
  if (st->codecpar->width <= 0 || st->codecpar->height <= 0)
    return fail("frame size unknown: the stream header has none and FFmpeg could not decode one");

  info.rotation = stream_rotation(st);
  info.width = st->codecpar->width;
  info.height = st->codecpar->height;
  if (info.rotation % 180 == 90) std::swap(info.width, info.height);

  // A container with an index (mp4/mov sample tables, mkv cues, avi idx1) says where the
  // last frame lies; past the end of the file means the file was cut short.
  const int entries = avformat_index_get_entries_count(st);
  const int64_t file_size = fmt->pb ? avio_size(fmt->pb) : -1;
  if (entries > 0 && file_size > 0) {
    const AVIndexEntry* last = avformat_index_get_entry(st, entries - 1);
    if (last && last->pos + std::max(last->size, 0) > file_size)
      return fail("truncated: the index places frame data up to byte " +
                  std::to_string(last->pos + last->size) + " but the file has " +
                  std::to_string(file_size) + " bytes");
  }

  if (info.image) {
    info.num_frames = 1;
    info.frames_from = FrameSource::kImage;
    return {true, info, ""};
  }
  info.fps = stream_fps(st);
  if (info.fps <= 0) return fail("frame rate unknown: the stream header has none");

  int64_t frames = 0;
  if (!count_frames && st->nb_frames > 0) {
    frames = st->nb_frames;
    info.frames_from = FrameSource::kHeader;
  } else if (!count_frames) {
    double seconds = 0;
    if (st->duration != AV_NOPTS_VALUE && st->duration > 0)
      seconds = double(st->duration) * av_q2d(st->time_base);
    else if (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0)
      seconds = double(fmt->duration) / AV_TIME_BASE;
    frames = std::llround(seconds * info.fps);
    info.frames_from = FrameSource::kDuration;
  }
  if (frames <= 0) {  // asked for, or neither nb_frames nor a duration
    std::string why;
    frames = count_packets(fmt, vs, why);
    if (frames < 0) return fail(why);
    if (frames == 0) return fail("no video frames in the file");
    info.frames_from = FrameSource::kCounted;
  }
  info.num_frames = frames;
  return {true, info, ""};
}

}  // namespace adaptiveload
