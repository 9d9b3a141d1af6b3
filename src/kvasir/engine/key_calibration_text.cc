// The built-in calibration text of engine/key_calibration.h: written for Kvasir, a mix of the
// kinds of text a served model sees (a story, dialogue, an expository paragraph, instructions,
// questions and answers, a few lines of code, an office note), so that the keys' statistics are
// not those of one genre. A user's own text can replace it (key_calibration.h).
#include <string_view>

#include "kvasir/engine/key_calibration.h"

namespace kvasir {

std::string_view key_calibration_text() {
  static constexpr std::string_view kText =
      R"(Once upon a time, in a small town beside a wide river, there lived a girl named Mira who loved to build things. Every morning she walked past the bakery, waved to the old man who sold newspapers, and counted the boats tied to the pier. "Why do the boats always face the same way?" she asked her father one day. He smiled and said, "Because the river pulls them all in one direction, and the ropes hold them still." Mira thought about that for a long time.
One summer the rain did not stop for nine days. The water rose over the steps of the market, and the children could not go to school. Mira gathered wood, nails, string and two empty barrels, and with the help of her brother Tom she built a little raft. They carried bread and milk to the neighbors whose houses stood near the water. When the sun came back, the mayor gave them each a blue ribbon, and everyone in town clapped and cheered.
The history of bridges is older than most people think. The first ones were simply logs laid across a stream; later builders learned to stack stones into arches, which carry weight by pressing each stone against the next. In the nineteenth century iron and then steel made much longer spans possible, and today a suspension bridge can cross more than two kilometers of open water. Engineers must consider wind, temperature, traffic and the slow movement of the ground itself.
To make a simple tomato soup, heat two spoons of oil in a pot, add one chopped onion and cook it for five minutes. Add four large tomatoes, a pinch of salt, half a teaspoon of sugar and 500 ml of water. Let it simmer for twenty minutes, then blend until smooth. Serve warm with fresh bread.
Q: What is the capital of France? A: Paris. Q: How many days are there in a leap year? A: 366. Q: Which planet is closest to the sun? A: Mercury.
def average(values):
    if not values:
        return 0.0
    return sum(values) / len(values)
The meeting is scheduled for Tuesday, March 14, at 10:30 in room 2B. Please bring the quarterly report, the budget spreadsheet, and any questions you have about the new schedule. If you cannot attend, send a short email to the team before Monday evening.
Late that night, the cat climbed onto the roof and looked at the moon. A soft wind moved through the trees, and somewhere far away a dog barked twice and then was quiet. The cat closed its eyes, happy and warm, and dreamed of fish that swam in the sky like birds.
)";
  return kText;
}

}  // namespace kvasir
