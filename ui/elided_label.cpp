#include "elided_label.h"

#include <QLabel>
#include <QPainter>
#include <QTextDocument>

namespace rematlab::ui {
namespace {

// Room for a word or two and the ellipsis: what the label keeps however narrow the window.
constexpr int kMinimumCharacters = 12;

}  // namespace

ElidedLabel::ElidedLabel(const QString& text, Qt::TextElideMode mode, QWidget* parent)
    : QFrame(parent), mode_(mode) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
  setText(text);
}

void ElidedLabel::setText(const QString& text) {
  if (text == text_) return;
  text_ = text;
  updateGeometry();
  update_tooltip();
  update();
}

void ElidedLabel::setAlignment(Qt::Alignment alignment) {
  alignment_ = alignment | Qt::AlignVCenter;
  update();
}

void ElidedLabel::set_description(const QString& description) {
  description_ = description;
  update_tooltip();
}

bool ElidedLabel::elided() const {
  return fontMetrics().horizontalAdvance(text_) > contentsRect().width();
}

QSize ElidedLabel::sizeHint() const {
  const QMargins margins = contentsMargins();
  return {fontMetrics().horizontalAdvance(text_) + margins.left() + margins.right() + 2,
          fontMetrics().height() + margins.top() + margins.bottom()};
}

QSize ElidedLabel::minimumSizeHint() const {
  const int narrow = fontMetrics().averageCharWidth() * kMinimumCharacters;
  return {std::min(narrow, sizeHint().width()), sizeHint().height()};
}

void ElidedLabel::paintEvent(QPaintEvent* event) {
  QFrame::paintEvent(event);
  QPainter painter(this);
  const QRect area = contentsRect();
  painter.drawText(area, alignment_, fontMetrics().elidedText(text_, mode_, area.width()));
}

void ElidedLabel::resizeEvent(QResizeEvent* event) {
  QFrame::resizeEvent(event);
  update_tooltip();
}

// The whole text whenever it is cut; the description (what the label shows) in any case.
void ElidedLabel::update_tooltip() {
  QStringList lines;
  if (elided()) lines << text_;
  if (!description_.isEmpty()) lines << description_;
  setToolTip(plain_tooltip(lines.join("\n\n")));
}

void cap_lines(QLabel* label, int lines) {
  label->setTextFormat(Qt::PlainText);
  label->setWordWrap(true);
  label->setMaximumHeight(lines * label->fontMetrics().lineSpacing() + 2);
}

void set_capped_text(QLabel* label, const QString& text) {
  label->setText(text);
  label->setToolTip(plain_tooltip(text));
  label->setVisible(!text.isEmpty());
}

QString plain_tooltip(const QString& text) {
  return Qt::mightBeRichText(text) ? Qt::convertFromPlainText(text, Qt::WhiteSpaceNormal) : text;
}

}  // namespace rematlab::ui
